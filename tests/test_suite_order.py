"""The suite's own order (tests/conftest.py): tests marked ``last`` run after every other test of the run."""

from __future__ import annotations


def test_tests_marked_last_come_after_every_other_test(request):
    marks = [item.get_closest_marker("last") is not None for item in request.session.items]
    assert marks == sorted(marks)  # False (the rest) first, then True
    if len(request.session.items) > 1:  # with others: the miniature recipe is the one marked, if it was collected
        names = [item.name for item, last in zip(request.session.items, marks, strict=True) if last]
        assert names in ([], ["test_quickstart_runs_the_recipe_in_miniature"])
