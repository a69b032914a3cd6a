"""``afm view`` in a real browser: the page opened from disk in headless Chromium (Debian's chromium and
chromium-driver, through Selenium), used as a user uses it.

The inputs are real afm runs (tests/view_runs.py): two scripted eval runs whose flipped questions are known, a run
without trajectories, a run of hostile text, ``afm infer`` output, an SFT set with its mask report, and verl dumps.
Checked: the table lists every sample and its filters narrow it to the right count; a row opens its trajectory
with tool calls, masked observations and tokens; compare mode lists the flips; RL groups side by side; the SFT
set's masks; hostile text runs no script; the page makes no request and logs no error; without JavaScript the page
still shows its table. ``AFM_VIEW_SCREENSHOT=docs/img/view.png`` also writes the README's screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import run_shared_dir
from view_runs import FLIP_DOWN, FLIP_UP, manifest_of, rows_of, view_inputs, write_page

from afm.offline.chromium import headless_chromium, missing
from afm.view import write_view

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model):
    # built once a run: test_view.py and test_view_browser.py may run on different xdist workers
    folder, lock = run_shared_dir(tmp_path_factory, "view-inputs")
    with lock:
        return view_inputs(folder, tiny_model)


@pytest.fixture(scope="module")
def page(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("view-browser") / "view.html"
    write_page(inputs, out)
    return out


@pytest.fixture(scope="module")
def rows(page):
    m = manifest_of(page)
    return [dict(r, label=m["sources"][r["src"]]["label"], index=i) for i, r in enumerate(rows_of(m))]


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as driver:
        yield driver


def wait(driver, test, timeout: float = 15.0, what: str = "the page"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = test(driver)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(driver, page: Path, fragment: str = "") -> None:
    driver.get("about:blank")
    driver.get_log("performance")  # what the browser did before: not this page's
    driver.get_log("browser")
    driver.get(page.absolute().as_uri() + fragment)
    wait(driver, lambda d: d.execute_script("return document.body.dataset.ready === '1'"), what="the page's start")


def goto(driver, fragment: str) -> None:
    driver.execute_script("location.hash = arguments[0]", fragment)


def css(driver, selector: str) -> list:
    return driver.find_elements("css selector", selector)


def count(driver) -> tuple[int, int]:
    """(shown, total) of the samples table, once no search is running."""
    node = wait(driver, lambda d: (n := css(d, "[data-testid=samples-count]")) and n[0].get_attribute("data-busy") in
                ("", None) and n[0], what="the search")
    return int(node.get_attribute("data-shown")), int(node.get_attribute("data-total"))


def choose(driver, testid: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(css(driver, f"[data-testid={testid}]")[0]).select_by_value(value)


def search(driver, text: str) -> None:
    box = css(driver, "[data-testid=filter-text]")[0]
    box.clear()
    if text:
        box.send_keys(text)
    else:  # clear() fires no input event
        driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", box)
    time.sleep(0.35)  # the search box waits 200 ms for more typing


def src_index(page: Path, label: str) -> str:
    return str(next(i for i, s in enumerate(manifest_of(page)["sources"]) if s["label"] == label))


def test_the_table_lists_every_sample_and_filters_narrow_it(browser, page, rows):
    open_page(browser, page, "#samples")
    assert count(browser) == (len(rows), len(rows)) == (53, 53)
    rendered = len(css(browser, "[data-testid=sample-row]"))
    assert 0 < rendered < len(rows)  # only the rows in view exist
    choose(browser, "filter-src", src_index(page, "sft"))
    assert count(browser)[0] == 10
    choose(browser, "filter-correct", "yes")
    assert count(browser)[0] == 4  # demo-math-0 and -1, two samples each
    choose(browser, "filter-correct", "")
    choose(browser, "filter-tool", "invalid")
    assert count(browser)[0] == 2
    choose(browser, "filter-src", "")
    choose(browser, "filter-tool", "error")
    assert count(browser)[0] == 4  # the 1/0 call of demo-math-3 in sft and rl
    choose(browser, "filter-tool", "")
    choose(browser, "filter-meth", "em")
    assert count(browser)[0] == 4  # the validation lines (verl's rollout dumps carry no reward keys)
    choose(browser, "filter-meth", "")
    choose(browser, "filter-st", "ok")
    assert count(browser)[0] == 53
    choose(browser, "filter-st", "")
    search(browser, "85 * 84")
    assert count(browser)[0] == 5
    search(browser, "ZeroDivisionError")  # only inside observations: the trajectories are searched
    assert count(browser)[0] == 4
    css(browser, "[data-testid=filter-deep]")[0].click()
    assert count(browser)[0] == 0
    css(browser, "[data-testid=filter-deep]")[0].click()
    search(browser, "")
    assert count(browser)[0] == 53
    browser.execute_script("document.querySelector('[data-testid=samples-table]').scrollTop = 1e6")
    last = wait(browser, lambda d: [r for r in css(d, "[data-testid=sample-row]")
                                    if r.get_attribute("data-row") == str(len(rows) - 1)], what="the last row")
    assert "step 2" in last[0].text


def test_a_row_opens_its_trajectory_with_tool_calls_and_masked_observations(browser, page, rows, inputs):
    open_page(browser, page, "#samples")
    choose(browser, "filter-src", src_index(page, "sft"))
    search(browser, "28 * 48")
    assert count(browser)[0] == 2
    row = css(browser, "[data-testid=sample-row]")[0]
    index = int(row.get_attribute("data-row"))
    row.click()
    wait(browser, lambda d: css(d, "[data-testid=tool-call]"), what="the trajectory")
    assert browser.current_url.endswith(f"#t={index}")
    call = css(browser, "[data-testid=tool-call]")[0]
    assert "print(1/0)" in call.text and css(call, "[data-testid=tool-status]")[0].text == "error"
    obs = css(browser, "[data-testid=observation]")
    assert len(obs) == 1 and "NOT TRAINED (MASK 0)" in obs[0].text.upper() and "ZeroDivisionError" in obs[0].text
    reward = css(browser, "[data-testid=reward]")[0].text
    assert "acc 0" in reward and "math_verify" in reward
    record = next(json.loads(line) for line in (inputs["sft"] / "results.jsonl").read_text().splitlines()
                  if json.loads(line)["qid"] == "demo-math-3" and json.loads(line)["sample"] == rows[index]["k"])
    segments = record["trajectory"]["segments"]
    css(browser, "[data-testid=mode-mask]")[0].click()
    masked = wait(browser, lambda d: css(d, "[data-testid=masked-span]"), what="the mask view")
    expected = [s["text"] for s in segments if s["kind"] == "observation"]
    assert [browser.execute_script("return arguments[0].textContent", m) for m in masked] == expected
    css(browser, "[data-testid=mode-tokens]")[0].click()
    tokens = wait(browser, lambda d: css(d, "[data-testid=token]"), what="the token view")
    ids = [i for s in segments for i in s["ids"]]
    assert [int(t.get_attribute("data-id")) for t in tokens] == ids
    texts = browser.execute_script("return [...document.querySelectorAll('[data-testid=token]')].map(t => t.textContent)")
    assert "".join(texts) == "".join(s["text"] for s in segments)  # every token spelled by the run's tokenizer
    assert tokens[0].get_attribute("title").startswith(f"id {ids[0]} ·")


def test_a_run_without_trajectories_says_so(browser, page, rows):
    index = next(r["index"] for r in rows if r["label"] == "notraj")
    open_page(browser, page, f"#t={index}")
    note = wait(browser, lambda d: css(d, "[data-testid=no-trajectory]"), what="the note")
    assert "--keep-trajectories" in note[0].text and css(browser, "[data-testid=reward]")


def test_compare_mode_lists_the_flipped_questions_and_both_routes(browser, page):
    open_page(browser, page, "#cmp")
    wait(browser, lambda d: css(d, "[data-testid=flip-up]"), what="compare")
    up = {i.get_attribute("data-qid") for i in css(browser, "[data-testid=flip-up] [data-testid=flip-item]")}
    down = {i.get_attribute("data-qid") for i in css(browser, "[data-testid=flip-down] [data-testid=flip-item]")}
    assert up == FLIP_UP and down == FLIP_DOWN
    assert "wrong in sft, right in rl (2)" in css(browser, "[data-testid=flip-up-title]")[0].text
    css(browser, "[data-testid=flip-up] [data-testid=flip-item]")[0].click()
    sides = wait(browser, lambda d: len(c := css(d, "[data-testid=cmp-side]")) == 2 and
                 all(css(s, "[data-testid=summary]") for s in c) and c, what="the two trajectories")
    assert "acc 0.00" in css(sides[0], "[data-testid=summary]")[0].text
    assert "acc 1.00" in css(sides[1], "[data-testid=summary]")[0].text
    assert all(css(s, "[data-testid=tool-call]") for s in sides)
    choose(browser, "cmp-b", src_index(page, "sft"))  # a run against itself flips nothing
    wait(browser, lambda d: "(0)" in css(d, "[data-testid=flip-up-title]")[0].text, what="no flips")


def test_rl_rollouts_by_step_and_a_group_side_by_side(browser, page):
    open_page(browser, page, "#rl")
    cards = wait(browser, lambda d: css(d, "[data-testid=rl-source]"), what="the dumps")
    assert [c.get_attribute("data-src") for c in cards] == [src_index(page, "rl/rollouts"), src_index(page, "rl/validation")]
    assert [s.text for s in css(cards[1], "[data-testid=rl-step]")] == ["0", "2"]
    steps = css(cards[0], "[data-testid=rl-step]")
    assert [s.text for s in steps] == ["1", "2"] and css(cards[0], "svg.chart circle")
    steps[0].click()
    groups = wait(browser, lambda d: css(d, "[data-testid=rl-group]"), what="the groups")
    assert len(groups) == 2 and "rewards 0.00 0.00 0.00 1.00" in groups[0].text
    groups[0].click()
    rollouts = wait(browser, lambda d: len(r := css(d, "[data-testid=rl-rollout]")) == 4 and
                    all(css(x, "[data-testid=tool-call]") for x in r) and r, what="the group's rollouts")
    heads = [r.find_element("css selector", "h3").text for r in rollouts]
    assert sum("advantage -0.500" in h for h in heads) == 3 and sum("advantage 1.500" in h for h in heads) == 1
    routes = [css(r, "[data-testid=tool-call]")[1].text for r in rollouts]
    assert sum("/census/4821" in t for t in routes) == 3 and sum("/town/4821" in t for t in routes) == 1


def test_the_sft_set_with_its_masks_and_mask_report(browser, page, inputs):
    open_page(browser, page, "#sft")
    card = wait(browser, lambda d: css(d, "[data-testid=sft-source]"), what="the SFT set")[0]
    report = json.loads(inputs["mask_report"].read_text())["train"]
    assert f"tokens_masked\n{report['tokens_masked']}" in card.text or f"tokens_masked {report['tokens_masked']}" in card.text
    css(browser, "[data-testid=sft-record]")[0].click()
    masked = wait(browser, lambda d: css(d, "[data-testid=masked-span]"), what="the record's masks")
    assert len(masked) == 2 and all("<observation>" in m.text for m in masked)
    assert css(browser, "[data-testid=trained-span]")


def test_hostile_text_is_shown_and_runs_nothing(browser, page, rows):
    index = next(r["index"] for r in rows if r["label"] == "hostile")
    open_page(browser, page, "#samples")
    choose(browser, "filter-src", src_index(page, "hostile"))
    assert count(browser)[0] == 2
    goto(browser, f"#t={index}")
    question = wait(browser, lambda d: css(d, "[data-testid=question]"), what="the hostile trajectory")[0]
    assert "<script>window.__afmPwned = 1</script>" in question.text and "{{ 7 * 7 }}" in question.text
    assert 'onerror="window.__afmPwned = 2"' in question.text and "javascript:window.__afmPwned = 3" in question.text
    assert "U+202E" in question.text  # the bidi override is shown, not obeyed
    for mode in ("coa", "mask", "tokens"):
        css(browser, f"[data-testid=mode-{mode}]")[0].click()
        time.sleep(0.3)
        assert browser.execute_script("return window.__afmPwned") is None
    assert browser.execute_script("return document.querySelectorAll('img, iframe, a[href^=\"javascript\"], textarea, "
                                  "[onerror]').length") == 0
    scripts = browser.execute_script("return [...document.scripts].map(s => s.type)")
    assert scripts.count("") == 1 and set(scripts) == {"", "application/octet-stream"}
    assert browser.execute_script("return window.__afmPwned") is None


def test_no_request_and_no_console_error_across_every_view(browser, page, rows):
    open_page(browser, page, "#overview")
    wait(browser, lambda d: css(d, "[data-testid=source-card]"), what="the overview")
    traj = next(r["index"] for r in rows if r["label"] == "rl")
    for fragment in ("#samples", f"#t={traj}", "#cmp", "#rl=6,2,1", "#sft", f"#t={rows[0]['index']}"):
        goto(browser, fragment)
        time.sleep(0.4)
    goto(browser, f"#t={traj}")
    wait(browser, lambda d: css(d, "[data-testid=mode-tokens]"), what="the token button")[0].click()
    wait(browser, lambda d: css(d, "[data-testid=token]"), what="the tokens")
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    url = page.absolute().as_uri()
    sent = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    requests = [m["params"]["request"]["url"] for m in sent if m["method"] == "Network.requestWillBeSent"]
    assert requests and all(u.split("#")[0] == url for u in requests), requests
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_readable_without_javascript(page, rows):
    with headless_chromium(javascript=False) as driver:
        driver.get(page.absolute().as_uri())
        table = driver.find_elements("css selector", "table.samples tr")
        assert len(table) == 1 + len(rows)
        assert not driver.find_element("id", "app").is_displayed()
        text = driver.find_element("css selector", ".noscript").text
        assert "What is 85 * 84 + 41?" in text and "<script>window.__afmPwned = 1</script>" in text
        assert "avg@k" in text and "Reward per step" in text


def test_screenshot(inputs, tmp_path):
    """The README's picture: compare mode on a flipped question (AFM_VIEW_SCREENSHOT=docs/img/view.png writes it)."""
    page = write_view([inputs["sft"], inputs["rl"]], tmp_path / "view.html", title="afm view: sft vs rl").path
    with headless_chromium(width=1280, height=820) as driver:
        open_page(driver, page, "#cmp")
        css(driver, "[data-testid=flip-up] [data-testid=flip-item]")[0].click()
        wait(driver, lambda d: len(css(d, "[data-testid=cmp-side] [data-testid=tool-call]")) >= 2, what="the pair")
        time.sleep(0.3)
        shot = tmp_path / "view.png"
        driver.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < len(data) < 300_000
    if target := os.environ.get("AFM_VIEW_SCREENSHOT"):
        dest = Path(target) if Path(target).is_absolute() else REPO / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)
