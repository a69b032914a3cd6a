"""``afm view`` at scale: a run of 10,000 trajectories of ~2,000 tokens each, opened in headless Chromium.

    .venv/bin/python benchmarks/bench_view.py                       # 10,000 x ~2,000 tokens, with log-probabilities
    .venv/bin/python benchmarks/bench_view.py --n 500 --rounds 1    # a quick check
    .venv/bin/python benchmarks/bench_view.py --no-logprobs         # records as the hf backend writes them

1. **Data.** ``--n`` eval results in afm's real record format: ``afm eval run --keep-trajectories`` lines whose
   ``trajectory`` is :meth:`afm.agent.record.Trajectory.to_dict` of a CoA rollout (think, plan, tool calls with
   their records, observations, reflection, answer), its segments' token ids from Qwen2.5's 151k vocabulary
   (``afm.offline.qwen_tokenizer``, built offline and cached in ``--out``), vLLM-style log-probabilities on every
   sampled token (float, full precision) unless ``--no-logprobs``. Seeded text from a few thousand words, numbers
   and URLs, so it compresses like text, not like a repeated template.
2. **Size.** The page (``afm view``) against the JSONL and against the JSONL's gzip (level 6): the target is 3x the
   gzip at most.
3. **Time to usable** in headless Chromium (Debian's chromium, a fresh profile; median of ``--rounds``): from the
   navigation until the page has loaded (the whole file parsed), the table's first rows are drawn and a filter
   (correct = no) has narrowed the table, measured from the driver's side (wall clock) and in the page
   (``performance.now()`` at first rows). Baseline: an empty page in the same browser, measured the same way.
   Also: opening one trajectory (its chunk decompressed on demand) and a text search over every trajectory.

Prints the figures; ``--json PATH`` also writes them.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from afm.agent.record import Segment, ToolCallRecord, Trajectory  # noqa: E402

TARGET_SECONDS = 3.0
TARGET_RATIO = 3.0


def word_pool(rng: random.Random, n: int = 4000) -> list[str]:
    """Pronounceable made-up words, a few thousand, as text of a real run has (not one template repeated)."""
    syll = ["ka", "lo", "mi", "ren", "sa", "tu", "ve", "dor", "ix", "qua", "bel", "nor", "pha", "sti", "ur", "gen",
            "tal", "om", "ri", "zel", "cra", "fin", "hol", "jup", "wes"]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def sentence(rng: random.Random, words: list[str], n: int) -> str:
    out = []
    for _ in range(n):
        r = rng.random()
        out.append(str(rng.randint(0, 99999)) if r < 0.08 else rng.choice(words))
    return " ".join(out).capitalize() + "."


def trajectory_texts(rng: random.Random, words: list[str], target_words: int) -> tuple[str, list[tuple[str, str]]]:
    """A question and the (kind, text) segments of one CoA rollout of about ``target_words`` words."""
    question = sentence(rng, words, rng.randint(10, 25)).rstrip(".") + "?"
    segs: list[tuple[str, str]] = []
    used = 0
    turn = 0
    while used < 0.85 * target_words:  # the last turn and the answer overshoot it
        tool = rng.choice(["web_search", "crawl_page", "wiki_search", "code"])
        if tool == "code":
            arg = f"\n```py\nx = {rng.randint(1, 999)} * {rng.randint(1, 999)}\nprint(x + {rng.randint(1, 99)})\n```\n"
        elif tool == "crawl_page":
            arg = f" http://site{rng.randint(1, 999)}.example/{rng.choice(words)}/{rng.randint(1, 9999)} "
        else:
            arg = " " + sentence(rng, words, rng.randint(3, 8)) + " "
        think = sentence(rng, words, rng.randint(25, 70))
        plan = f"<plan>{sentence(rng, words, rng.randint(15, 40))}</plan>\n" if turn == 0 else ""
        reflect = f"<reflection>{sentence(rng, words, rng.randint(10, 30))}</reflection>\n" if turn % 3 == 2 else ""
        model = f"<think>{think}</think>\n{plan}{reflect}<{tool}>{arg}</{tool}>"
        obs = "\n".join(sentence(rng, words, rng.randint(8, 20)) for _ in range(rng.randint(3, 9)))
        segs += [("model", model), ("observation", f"\n\n<observation>\n{obs}\n</observation>\n\n")]
        used += len(model.split()) + len(obs.split())
        turn += 1
    segs.append(("model", f"<think>{sentence(rng, words, 20)}</think>\n<answer>{rng.randint(1, 99999)}</answer>"))
    return question, segs


def write_run(run: Path, tokenizer_dir: Path, n: int, target_tokens: int, logprobs: bool, seed: int) -> None:
    """``run/results.jsonl`` + ``config.json`` as ``afm eval run --keep-trajectories`` writes them."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = random.Random(seed)
    words = word_pool(rng)
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({
        "model": "bench-model", "backend": "openai", "base_url": "http://127.0.0.1:10000/v1", "engine": "vllm",
        "prompt_style": "user", "benchmarks": ["bench"], "seed": 0, "settings": {"bench": {"n": 1}},
        "started_at": "2026-11-28T00:00:00", "argv": ["--tokenizer", str(tokenizer_dir)],
        "expected_samples": {"bench": n}}, indent=1))
    t0 = time.monotonic()
    total_tokens, total_words = 0, 0
    with open(run / "results.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            per_word = total_tokens / total_words if total_words else 3.5  # tokens per word so far
            question, segs = trajectory_texts(rng, words, int(target_tokens / per_word))
            ids = tok([t for _, t in segs], add_special_tokens=False)["input_ids"]
            total_words += sum(len(t.split()) for _, t in segs)
            segments, calls = [], []
            for (kind, text), seg_ids in zip(segs, ids, strict=True):
                lps = [-rng.expovariate(3.0) for _ in seg_ids] if logprobs and kind == "model" else None
                segments.append(Segment(kind, list(seg_ids), text, lps))
                if kind == "observation":
                    name = segments[-2].text.rsplit("</", 1)[1].rstrip(">")
                    calls.append(ToolCallRecord(turn=len(calls), name=name, argument="…", status=rng.choice(
                        ["ok"] * 8 + ["error", "timeout"]), latency_s=round(rng.uniform(0.05, 3), 3),
                        observation_chars=len(text), observation_tokens=len(seg_ids), meta={"backend": "bench"}))
            traj = Trajectory(prompt_ids=list(range(300)), segments=segments, tool_calls=calls,
                              finish_reason="answer", turns=len(calls) + 1, wall_s=rng.uniform(2, 60),
                              prompt_text=f"You are a research agent.\n\nQuestion: {question}",
                              meta={"prompt_key": "web_agent", "prompt_version": "bench"})
            d = traj.to_dict()
            d.pop("prompt_ids")
            acc = float(rng.random() < 0.45)
            total_tokens += traj.n_response_tokens
            record = {"key": f"bench/q{i}#0", "benchmark": rng.choice(["gaia", "browsecomp", "hle", "webwalker"]),
                      "qid": f"q{i}", "sample": 0, "status": "ok", "failure": None, "question": question,
                      "gold": str(rng.randint(1, 99999)), "level": None, "data_source": "bench", "score": acc,
                      "acc": acc, "method": rng.choice(["judge", "em_f1_fallback"]), "pred": traj.final_answer(),
                      "reward_error": None, "tests_from": None, "finish_reason": "answer",
                      "tool_calls": len(calls), "tool_counts": traj.tool_counts(), "model_tokens": traj.n_model_tokens,
                      "observation_tokens": traj.n_observation_tokens, "turns": traj.turns,
                      "wall_s": round(traj.wall_s, 3), "ids_source": "sampled", "error": None, "trajectory": d}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"data: {n} trajectories, {total_tokens / n:.0f} response tokens each on average, written in "
          f"{time.monotonic() - t0:.0f} s", flush=True)


def gzip_size(path: Path) -> int:
    """Bytes of ``path`` gzip-compressed at level 6 (what ``gzip`` does by default)."""
    size = 0
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip stream, read in blocks (the file is large)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            size += len(z.compress(block))
    return size + len(z.flush())


def measure(page: Path, empty: Path, rounds: int) -> dict[str, float]:
    """Median seconds: empty page; viewer until loaded, first rows drawn, a filter applied; a trajectory; a search."""
    from afm.offline.chromium import headless_chromium

    def wait(driver, script: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not driver.execute_script(script):
            if time.monotonic() > deadline:
                raise TimeoutError(script)
            time.sleep(0.005)

    runs: dict[str, list[float]] = {k: [] for k in ("empty", "loaded", "usable", "rows_in_page", "filter",
                                                     "load_event_in_page", "trajectory", "search")}
    with headless_chromium(log=False) as driver:
        driver.set_page_load_timeout(300)
        for _ in range(rounds):
            driver.get("about:blank")
            t0 = time.monotonic()
            driver.get(empty.as_uri())
            runs["empty"].append(time.monotonic() - t0)
            driver.get("about:blank")
            t0 = time.monotonic()
            driver.get(page.as_uri() + "#samples")
            runs["loaded"].append(time.monotonic() - t0)
            wait(driver, "return document.body.dataset.ready === '1' && "
                         "document.querySelectorAll('[data-testid=sample-row]').length > 0")
            t1 = time.monotonic()
            shown = driver.execute_script(
                "const s = document.querySelector('[data-testid=filter-correct]'); s.value = 'no';"
                "s.dispatchEvent(new Event('change')); return document.querySelector("
                "'[data-testid=samples-count]').dataset.shown")
            runs["filter"].append(time.monotonic() - t1)
            runs["usable"].append(time.monotonic() - t0)
            assert 0 < int(shown) < 10**7
            nav = driver.execute_script("return performance.getEntriesByType('navigation')[0].toJSON()")
            runs["load_event_in_page"].append(nav["loadEventEnd"] / 1000)
            runs["rows_in_page"].append(float(driver.execute_script("return document.body.dataset.readyAt")) / 1000)
            t2 = time.monotonic()
            driver.execute_script("document.querySelector('[data-testid=sample-row]').click()")
            wait(driver, "return document.querySelectorAll('[data-testid=tool-call]').length > 0")
            runs["trajectory"].append(time.monotonic() - t2)
            driver.execute_script("location.hash = '#samples'")
            t3 = time.monotonic()
            driver.execute_script(
                "const s = document.querySelector('[data-testid=filter-text]'); s.value = 'zzqqxx';"
                "s.dispatchEvent(new Event('input'))")
            time.sleep(0.25)  # the search box's 200 ms wait for more typing, counted
            wait(driver, "const c = document.querySelector('[data-testid=samples-count]');"
                         "return c.dataset.busy === '' && c.dataset.shown === '0'", timeout=300)
            runs["search"].append(time.monotonic() - t3)
    return {k: statistics.median(v) for k, v in runs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="trajectories (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=2000, help="response tokens per trajectory, about (default: %(default)s)")
    p.add_argument("--no-logprobs", action="store_true", help="no log-probabilities (the hf backend's records)")
    p.add_argument("--rounds", type=int, default=3, help="browser measurements, median (default: %(default)s)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "view"), help="work folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)

    from afm.offline.chromium import missing

    if (why := missing()) is not None:
        print(f"bench_view: {why}", file=sys.stderr)
        return 2
    from afm.offline.qwen_tokenizer import build_qwen25_tokenizer
    from afm.view import write_view

    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_qwen25_tokenizer(out.parent / "qwen2.5_tokenizer")
    run = out / f"run_{args.n}_{args.tokens}{'_nolp' if args.no_logprobs else ''}"
    if not (run / "results.jsonl").is_file():
        shutil.rmtree(run, ignore_errors=True)
        write_run(run, tokenizer, args.n, args.tokens, not args.no_logprobs, args.seed)
    jsonl = (run / "results.jsonl").stat().st_size
    gz = gzip_size(run / "results.jsonl")
    page = out / f"{run.name}.html"
    t0 = time.monotonic()
    info = write_view([run], page)
    build = time.monotonic() - t0
    empty = out / "empty.html"
    empty.write_text("<!doctype html><html><head><meta charset=utf-8><title>empty</title></head><body></body></html>")
    print(f"page: {info.bytes / 1e6:.1f} MB written in {build:.0f} s; measuring in Chromium ({args.rounds} rounds)",
          flush=True)
    t = measure(page, empty, args.rounds)
    ratio = info.bytes / gz
    figures = {"n": args.n, "tokens": args.tokens, "logprobs": not args.no_logprobs, "jsonl_bytes": jsonl,
               "jsonl_gzip_bytes": gz, "page_bytes": info.bytes, "page_vs_gzip": round(ratio, 3),
               "page_vs_jsonl": round(info.bytes / jsonl, 3), "build_s": round(build, 1),
               **{f"{k}_s": round(v, 3) for k, v in t.items()}}
    print(f"size: JSONL {jsonl / 1e6:.1f} MB, its gzip {gz / 1e6:.1f} MB (baseline), the page {info.bytes / 1e6:.1f} MB "
          f"= {ratio:.2f}x the gzip ({info.bytes / jsonl:.2f}x the JSONL); target <= {TARGET_RATIO:.0f}x: "
          f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}")
    print(f"time to usable: {t['usable']:.2f} s (loaded {t['loaded']:.2f} s, first rows at {t['rows_in_page']:.2f} s "
          f"in the page, load event at {t['load_event_in_page']:.2f} s, a filter {1000 * t['filter']:.0f} ms); "
          f"baseline: an empty page {t['empty']:.2f} s; target <= {TARGET_SECONDS:.0f} s: "
          f"{'met' if t['usable'] <= TARGET_SECONDS else 'MISSED'}")
    print(f"on demand: one trajectory opened in {t['trajectory']:.2f} s; a text search over every trajectory "
          f"{t['search']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
