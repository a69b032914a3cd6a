"""Reward throughput: EM and Math-Verify scores/s over 10k items, and the LLM judge against the raw stand-in rate.

```bash
.venv/bin/python benchmarks/bench_rewards.py                      # n=10000, judge 2000 requests x 3 rounds
.venv/bin/python benchmarks/bench_rewards.py --n 1000 --judge-n 300 --rounds 1   # quick check
```

1. **EM**: ``compute_score("hotpotqa", ...)`` end to end (ground-truth JSON parsing, last-answer extraction,
   format check, EM/F1) on seeded CoA trajectories with observations; a third correct, a third wrong, a third
   multi-answer. Every result is checked against the label the generator knows.
2. **Math**: ``compute_score("MATH500", ...)`` on seeded pairs that need Math-Verify (fraction vs decimal,
   percentages, intervals, sets, symbolic forms, wrong answers) plus a share of string-identical answers (the
   short-cut path); once from one thread and once from as many threads as the worker pool has workers. Results
   are checked against the generator's labels.
3. **Judge**: the local OpenAI-compatible stand-in (``afm.offline.openai_standin``) answers every request with a
   JSON verdict. Baseline: plain ``httpx.AsyncClient`` posting the same chat requests at the same concurrency
   (semaphore), parsing only the HTTP JSON. Measured: ``compute_score_async("gaia", ..., judge=Judge(cache off))``
   for distinct predictions, and once more with a warm cache. Rounds alternate baseline and judge; medians are
   reported, and the ratio judge/baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from afm.rewards import Judge, JudgeConfig, compute_score, compute_score_async, default_verifier  # noqa: E402
from afm.rewards.judge import build_messages  # noqa: E402
from afm.trajectory import render  # noqa: E402

CORRECT = json.dumps({"rationale": "Both answers name the same entity.", "judgement": "correct"})
WORDS = ("river", "castle", "north", "queen", "empire", "harbor", "saint", "valley", "iron", "crown", "delta",
         "summit", "grove", "lake", "bridge", "tower", "forest", "garden", "hill", "port")


def _name(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS).title() for _ in range(rng.randint(1, 3)))


def qa_items(n: int, seed: int) -> list[tuple[str, str, float]]:
    """(solution, ground-truth JSON, expected acc) for hotpotqa-style trajectories."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        golds = [_name(rng) for _ in range(rng.randint(1, 3))]
        kind = i % 3
        if kind == 0:
            answer, acc = "the " + golds[0].lower(), 1.0
        elif kind == 1:
            answer, acc = golds[0] + " Extra", 0.0
        else:
            answer, acc = " | ".join(golds[: 2]), 1.0  # every part is a gold alias
        steps = [("think", "I should search for the entity. " * rng.randint(1, 4))]
        for _ in range(rng.randint(1, 3)):
            steps += [("wiki_search", _name(rng)), ("observation", "Doc: " + " ".join(rng.choices(WORDS, k=80)))]
        steps += [("think", "The documents agree."), ("answer", answer)]
        gt = json.dumps({"target": golds, "question": f"Which place is described in item {i}?"})
        items.append((render(steps), gt, acc))
    return items


def _math_pair(rng: random.Random) -> tuple[str, str, bool]:
    kind = rng.randrange(8)
    if kind == 0:  # fraction vs decimal
        q = rng.choice([2, 4, 5, 8, 10, 20, 25, 40])
        p = rng.randint(1, 5 * q)
        return f"\\frac{{{p}}}{{{q}}}", f"{p / q:g}", True
    if kind == 1:  # percentage vs decimal
        p = rng.randint(1, 99)
        return f"{p / 100:g}", f"{p}\\%", True
    if kind == 2:  # boxed integer written as a float
        k = rng.randint(1, 10_000)
        return str(k), f"The answer is \\boxed{{{k}.0}}", True
    if kind == 3:  # interval
        a, b = rng.randint(-20, 0), rng.randint(1, 20)
        closed = rng.random() < 0.5
        return f"[{a},\\frac{{{2 * b}}}{{2}})", f"[{a}, {b}{']' if closed else ')'}", not closed
    if kind == 4:  # set, permuted
        xs = rng.sample(range(1, 50), 3)
        ys = list(xs)
        rng.shuffle(ys)
        return "\\{" + ",".join(map(str, xs)) + "\\}", "\\{" + ", ".join(map(str, ys)) + "\\}", True
    if kind == 5:  # symbolic
        a = rng.randint(1, 9)
        return f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2", True
    if kind == 6:  # wrong
        k = rng.randint(1, 999)
        return str(k), f"\\boxed{{{k + rng.randint(1, 9)}}}", False
    k = rng.randint(1, 999)  # identical strings: the short-cut path
    return f"\\frac{{{k}}}{{7}}", f"\\frac{{{k}}}{{7}}", True


def math_items(n: int, seed: int) -> list[tuple[str, str, float]]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        gold, answer, ok = _math_pair(rng)
        text = render([("think", "compute"), ("code", "```py\nprint(1)\n```"), ("observation", "1"),
                       ("answer", answer)])
        items.append((text, gold, float(ok)))
    return items


def bench_inprocess_math(items: list[tuple[str, str, float]]) -> tuple[float, int]:
    """Baseline: the worker's own check run in this process's main thread (no IPC, no isolation, no timeout)."""
    from afm.rewards._math_worker import _check
    from afm.trajectory import last_answer

    start = time.perf_counter()
    wrong = 0
    for text, gold, expected in items:
        pred = last_answer(text)
        exact = pred.replace(" ", "") == gold.replace(" ", "")
        wrong += (exact or _check([gold], pred)[0]) != bool(expected)
    return len(items) / (time.perf_counter() - start), wrong


def bench_scores(source: str, items: list[tuple[str, str, float]], threads: int = 1) -> tuple[float, int, dict]:
    """(scores/s, wrong results, method counts)."""
    def one(item):
        return compute_score(source, item[0], item[1])

    start = time.perf_counter()
    if threads == 1:
        results = [one(it) for it in items]
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(one, items, chunksize=16))
    elapsed = time.perf_counter() - start
    wrong = sum(r["acc"] != it[2] for r, it in zip(results, items, strict=True))
    methods: dict[str, int] = {}
    for r in results:
        path = json.loads(r["details"]).get("path", r["method"])
        methods[path] = methods.get(path, 0) + 1
    return len(items) / elapsed, wrong, methods


async def _raw_rate(base_url: str, n: int, concurrency: int) -> float:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    url = base_url + "/chat/completions"
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency,
                                                     max_keepalive_connections=concurrency),
                                 timeout=60) as client:
        async def one(i: int) -> None:
            body = {"model": "bench", "messages": build_messages("Question?", ["Gold"], f"Prediction {i}"),
                    "temperature": 0.0, "max_tokens": 1024}
            async with sem:
                resp = await client.post(url, json=body)
            resp.raise_for_status()
            resp.json()["choices"][0]["message"]["content"]

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return n / (time.perf_counter() - start)


async def _socket_rate(port: int, n: int, concurrency: int) -> float:
    """What the stand-in serves over plain keep-alive sockets (no HTTP client library), for context."""
    body = json.dumps({"model": "bench", "messages": build_messages("Question?", ["Gold"], "Prediction")}).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    async def connection(count: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(count):
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(connection(n // concurrency) for _ in range(concurrency)))
    return (n // concurrency) * concurrency / (time.perf_counter() - start)


async def _judge_rate(judge: Judge, n: int, tag: str) -> tuple[float, int]:
    start = time.perf_counter()
    results = await asyncio.gather(*(compute_score_async("gaia", f"<answer>Prediction {tag} {i}</answer>",
                                                         {"target": ["Gold"], "question": "Question?"},
                                                         judge=judge) for i in range(n)))
    rate = n / (time.perf_counter() - start)
    return rate, sum(r["method"] != "judge" or r["acc"] != 1.0 for r in results)


def bench_judge(n: int, concurrency: int, rounds: int) -> dict:
    from afm.offline.openai_standin import StandIn

    raw, judged, bad = [], [], 0
    with StandIn(default_reply=CORRECT) as llm, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_raw_rate(llm.base_url, 200, concurrency))  # warm both paths up
        warm = Judge(JudgeConfig(base_url=llm.base_url, model="bench", cache="off", concurrency=concurrency))
        asyncio.run(_judge_rate(warm, 200, "warm"))
        warm.close()
        for r in range(rounds):
            llm.reset()
            llm.set_default(CORRECT)
            raw.append(asyncio.run(_raw_rate(llm.base_url, n, concurrency)))
            judge = Judge(JudgeConfig(base_url=llm.base_url, model="bench", cache="off", concurrency=concurrency))
            rate, errors = asyncio.run(_judge_rate(judge, n, f"r{r}"))
            judged.append(rate)
            bad += errors
            judge.close()
        llm.reset()
        socket_rate = asyncio.run(_socket_rate(llm.port, n, concurrency))
        cached_judge = Judge(JudgeConfig(base_url=llm.base_url, model="bench", concurrency=concurrency,
                                         cache=os.path.join(tmp, "judge.sqlite")))
        asyncio.run(_judge_rate(cached_judge, n, "cache"))  # fill
        before = len(llm.requests())
        cached_rate, errors = asyncio.run(_judge_rate(cached_judge, n, "cache"))
        bad += errors
        extra_requests = len(llm.requests()) - before
        cached_judge.close()
    return {"raw": statistics.median(raw), "judge": statistics.median(judged), "raw_rounds": raw,
            "judge_rounds": judged, "cached": cached_rate, "socket": socket_rate, "cache_extra_requests": extra_requests, "wrong": bad}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="items for the EM and math benchmarks")
    p.add_argument("--judge-n", type=int, default=2000, help="judge requests per round")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="judge rounds (baseline and judge alternate)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=REPO / "benchmarks" / "out" / "bench_rewards.json")
    args = p.parse_args(argv)
    os.environ.pop("GRM_BASE_URL", None)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # the in-process baseline runs without timeouts

    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, math workers: {default_verifier().size}")
    qa = qa_items(args.n, args.seed)
    em_rate, em_wrong, _ = bench_scores("hotpotqa", qa)
    print(f"EM        {em_rate:10,.0f} scores/s   wrong results: {em_wrong}/{len(qa)}")

    maths = math_items(args.n, args.seed)
    threads = default_verifier().size
    bench_scores("MATH500", math_items(200, args.seed + 99), threads)  # start and warm every worker untimed
    base_rate, base_wrong = bench_inprocess_math(maths)  # same items; the workers' parse caches are their own
    print(f"math in-process baseline {base_rate:8,.0f} checks/s  wrong results: {base_wrong}/{len(maths)}")
    m1_rate, m1_wrong, m1_paths = bench_scores("MATH500", maths)
    print(f"math x1   {m1_rate:10,.0f} scores/s   wrong results: {m1_wrong}/{len(maths)}   paths: {m1_paths}"
          f"   ratio to in-process {m1_rate / base_rate:.2f}")
    mt_rate, mt_wrong, _ = bench_scores("MATH500", math_items(args.n, args.seed + 1), threads)
    print(f"math x{threads}   {mt_rate:10,.0f} scores/s   wrong results: {mt_wrong}/{len(maths)}")

    j = bench_judge(args.judge_n, args.concurrency, args.rounds)
    print(f"judge raw {j['raw']:10,.0f} req/s    (plain httpx, concurrency {args.concurrency}; rounds "
          f"{', '.join(f'{x:,.0f}' for x in j['raw_rounds'])})")
    print(f"judge     {j['judge']:10,.0f} scores/s (compute_score_async, cache off; rounds "
          f"{', '.join(f'{x:,.0f}' for x in j['judge_rounds'])})  ratio {j['judge'] / j['raw']:.2f}")
    print(f"sockets   {j['socket']:10,.0f} req/s    (the stand-in over raw keep-alive sockets, no client library)")
    print(f"judge hit {j['cached']:10,.0f} scores/s (warm cache; {j['cache_extra_requests']} requests reached the "
          f"stand-in)  wrong results: {j['wrong']}")
    summary = {"n": args.n, "em": em_rate, "em_wrong": em_wrong, "math_inprocess": base_rate, "math_1": m1_rate, "math_threads": threads,
               "math_t": mt_rate, "math_wrong": m1_wrong + mt_wrong, "math_paths": m1_paths,
               "judge": j, "judge_n": args.judge_n, "concurrency": args.concurrency}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
