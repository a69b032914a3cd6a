"""The suite's own order (tests/conftest.py): in one process, tests marked ``last`` run after every other test of the
run; on pytest-xdist's workers (scripts/test.sh), the longest files first, the file of a ``last`` test before all."""

from __future__ import annotations

from conftest import HEAVY_FILES, REPO, under_xdist

RECIPE = "test_quickstart_runs_the_recipe_in_miniature"


def _file(item) -> str:
    return item.nodeid.split("::", 1)[0]


def test_tests_marked_last_run_last_in_one_process_and_first_on_xdist_workers(request):
    items = request.session.items
    marks = [item.get_closest_marker("last") is not None for item in items]
    names = [item.name for item, last in zip(items, marks, strict=True) if last]
    if len(items) > 1:  # with others: the miniature recipe is the one marked, if it was collected
        assert names in ([], [RECIPE])
    if not under_xdist(request.config):
        assert marks == sorted(marks)  # False (the rest) first, then True
        return
    files = [_file(item) for item in items]
    if names:
        recipe_file = _file(next(item for item in items if item.name == RECIPE))
        assert items[0].name == RECIPE  # the run's longest test, first
        assert files[: files.count(recipe_file)] == [recipe_file] * files.count(recipe_file)
    # the heavy files follow in their listed order, each file's tests together
    order = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    heavy = [f for f in order if f in HEAVY_FILES]
    assert heavy == sorted(heavy, key=HEAVY_FILES.index)
    assert len(order) == len(set(order))


def test_every_heavy_file_is_a_test_file():
    missing = [name for name in HEAVY_FILES if not (REPO / name).is_file()]
    assert missing == []
