#!/usr/bin/env python
"""Preprocessing throughput and mask correctness of afm's observation masking on LLaMA-Factory's processors.

    .venv/bin/python benchmarks/bench_masking.py [--n 10000] [--out benchmarks/out] [--rounds 3]

What it does (CPU only, in one process):

1. builds the tiny Qwen2-style tokenizer/model with ``afm.model.tiny.build_tiny_model`` (reused from
   ``--out`` when present), or with ``--tokenizer qwen2.5`` Qwen2.5's 151k vocabulary from the dashscope wheel
   (``afm.offline.qwen_tokenizer``, cached in ``--out``), and generates ``--n`` seeded, adversarial Chain-of-Agents
   trajectories;
2. builds LLaMA-Factory's real ``SupervisedDatasetProcessor`` (template ``qwen``) twice after
   ``afm.sft.overlay.apply()``: ``ignore_observation=False`` (the wrapper calls straight through to the stock
   code) and ``ignore_observation=True`` (default check mode ``observation``);
3. times ``preprocess_dataset`` on batches of 1000 converted examples (what ``datasets.map`` passes), several
   rounds in alternating order, and reports the median input tokens/s of each and the ratio masked/stock;
4. checks every trained label of every sample against an independent oracle: per-token character ranges come
   from the tokenizer's offset mapping of the assistant text (or a byte-level decode when the ids differ), the
   expected mask from the rule documented in ``afm/sft/masking.py`` (a token is masked iff it overlaps an
   ``<observation>`` ... ``</observation>`` core, or lies entirely inside the core plus its surrounding ASCII
   whitespace). The oracle shares no code with ``afm.sft.masking`` or ``afm.trajectory.spans``;
5. checks that deliberately broken samples are dropped with the right reason, probes truncation by
   ``cutoff_len`` at and around observation boundaries, probes Unicode normalisation next to the tags, and times
   the ``PairwiseDatasetProcessor`` (DPO) the same way.

Exit status: 0 when the main set has no wrong token and no unexpected drop, 1 otherwise. The probe sections
report what they find without changing the exit status (they document known edge cases).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

IGNORE = -100
OPEN_TAG, CLOSE_TAG = "<observation>", "</observation>"
ASCII_WS = " \t\r\n\f\v"  # the padding alphabet of the rule (environment-written whitespace)


# ----------------------------------------------------------------------------------------------------------
# synthetic trajectories


CJK = "观测结果显示该城市位于河流的北岸人口约为三十万历史悠久东京都の天気は晴れです서울의날씨는맑음"
EMOJI = ["😀", "🚀", "👩‍💻", "🇯🇵", "👍🏽", "🧪", "✅", "❤️", "🤖", "📈", "👨‍👩‍👧‍👦"]
OTHER_SCRIPTS = ["مرحبا بالعالم", "नमस्ते दुनिया", "Привет, мир", "γειά σου κόσμε", "שלום עולם", "Ṫḧïṡ ïṡ ẗëṡẗ"]
DECOMPOSED = ["e\u0301", "a\u0308", "n\u0303", "o\u0302", "A\u030a"]  # NFC composes these inside bodies
ODD_CHARS = ["\u200b", "\u00a0", "\u3000", "\ufeff", "\t", "\u2028", "\x0c"]
TAG_LIKE = [
    "<answer>x</answer>", "<think>", "</think>", "<answer>", "<code>print(1)</code>", "<observation>",
    "</observations>", "< /observation>", "<Observation>", "</ observation>", "<observation >", "</observation",
    "<div class=\"r\"><p>text</p></div>", "a < b > c", "<|im_start|>", "<web_search>q</web_search>", "<<>>",
    "<plan>1. x</plan>", "&lt;observation&gt;",
]
WORDS = (  # noqa: SIM905
    "the river town was founded by merchants who traded salt and amber along the northern road during the long "
    "winter months records show population growth result value error status query page source archive index "
    "python print stdout returned table column entry search found results about history of"
).split()
TOOLS = ["web_search", "code", "crawl_page", "wiki_search", "visual_inspector"]
PRE_OBS = ["\n\n"] * 6 + ["", "\n", " ", "  ", "\r\n\r\n", "\r\n", " \n\n", "\t", "\n \n", "\n\n\n", "\u3000",
                          "\u00a0\n", "x "]
POST_OBS = ["\n\n"] * 6 + ["", "\n", "\n\n\n", "\r\n", "\r\n\r\n", " ", "\n\n ", "\t\n", "\n\n\n\n"]
INNER_OPEN = ["\n"] * 4 + ["", " ", "\r\n", "\n\n"]
INNER_CLOSE = ["\n"] * 4 + ["", " ", "\r\n", " \n", "\n\n"]
AFTER_OBS = ["think", "think", "reflection", "tool", "tool", "text", "text_glued", "answer"]


@dataclass
class Gen:
    """Seeded generator of varied, adversarial but well-formed CoA trajectories."""

    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def words(self, lo: int, hi: int) -> str:
        r = self.rng
        return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))

    def sprinkle(self, s: str, p: float) -> str:
        """Insert unicode oddities into ``s`` with probability ``p`` per word gap."""
        r = self.rng
        parts = s.split(" ")
        for i in range(len(parts)):
            if r.random() < p:
                kind = r.random()
                if kind < 0.3:
                    k = r.randint(1, 12)
                    j = r.randrange(len(CJK) - k)
                    parts[i] += " " + CJK[j : j + k]
                elif kind < 0.55:
                    parts[i] += r.choice(EMOJI)
                elif kind < 0.7:
                    parts[i] += " " + r.choice(OTHER_SCRIPTS)
                elif kind < 0.85:
                    parts[i] += r.choice(DECOMPOSED)
                else:
                    parts[i] += r.choice(ODD_CHARS)
        return " ".join(parts)

    def reasoning(self) -> str:
        r = self.rng
        body = " " + self.sprinkle(self.words(4, 30), 0.05) + " "
        if r.random() < 0.1:
            body += "since 3 < 5 and 7 > 2, "
        return body

    def tool_call(self, tool: str) -> str:
        r = self.rng
        if tool == "code":
            inner = r.choice(["print(6 * 7)", "print('<answer>42</answer>')", "x = [i for i in range(9) if i < 4]\n"
                              "print(x)", "s = '<think>'\nprint(s.upper())", "print('中文 😀')"])
            body = f"\n```py\n{inner}\n```\n"
        elif tool == "crawl_page":
            body = " | ".join(f"https://site{r.randint(0, 99)}.example/p/{r.randint(0, 999)}"
                              for _ in range(r.randint(1, 3)))
        elif tool == "visual_inspector":
            body = f'\n```json\n{{"file_path": "img_{r.randint(0, 99)}.png", "question": "what is shown?"}}\n```\n'
        else:
            body = self.sprinkle(self.words(2, 8), 0.1)
        return f"<{tool}>{body}</{tool}>"

    def obs_body(self) -> str:
        r = self.rng
        kind = r.random()
        if kind < 0.04:
            return ""
        if kind < 0.07:
            return r.choice(["\n", "\n\n", " ", "\r\n"])
        if kind < 0.25:  # long page, 1-3k chars
            target = r.randint(1000, 3000)
            chunks = []
            size = 0
            while size < target:
                piece = r.choice(TAG_LIKE) if r.random() < 0.15 else self.sprinkle(self.words(5, 40), 0.04)
                piece += r.choice(["\n", "\n\n", " ", ". "])
                chunks.append(piece)
                size += len(piece)
            body = "".join(chunks)
        elif kind < 0.5:  # search results
            hits = []
            for i in range(r.randint(1, 5)):
                title = self.sprinkle(self.words(2, 5), 0.15)
                hits.append(f"{i + 1}. [{title}](https://enc.example/{i})\n{self.sprinkle(self.words(8, 30), 0.1)}")
            body = "A search found results:\n\n## Web Results\n" + "\n".join(hits)
        elif kind < 0.7:  # code output
            out = r.choice([str(r.randint(-99999, 99999)), self.sprinkle(self.words(1, 10), 0.3),
                            "Traceback (most recent call last):\n  File \"<stdin>\", line 1\nNameError: x"])
            body = f"[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n{out}\n[STDOUT:END]"
        else:  # short, tag-heavy or unicode-heavy
            bits = [self.sprinkle(self.words(1, 12), 0.3) for _ in range(r.randint(1, 3))]
            for _ in range(r.randint(0, 3)):
                bits.insert(r.randrange(len(bits) + 1), r.choice(TAG_LIKE))
            body = r.choice([" ", "\n", ""]).join(bits)
        if r.random() < 0.03:
            body += " <|im_end|> "
        if r.random() < 0.25:
            body = body.replace("\n", "\r\n")
        if r.random() < 0.1:
            body = r.choice(["  ", "\n", "\t", " \r\n"]) + body + r.choice(["  ", "\n\n", "\t", "\r\n "])
        assert CLOSE_TAG not in body
        return body

    def trajectory(self) -> str:
        r = self.rng
        n_calls = r.randint(1, 6)
        if r.random() < 0.3:  # canonical: what afm.trajectory.render writes (format_observation padding)
            from afm.trajectory import render

            items = [("think", self.reasoning())]
            if r.random() < 0.4:
                items.append(("plan", self.reasoning()))
            for _ in range(n_calls):
                tool = r.choice(TOOLS)
                items.append((tool, self.tool_call(tool)[len(tool) + 2 : -(len(tool) + 3)]))
                items.append(("observation", self.obs_body()))
                if r.random() < 0.7:
                    items.append((r.choice(["think", "reflection"]), self.reasoning()))
            items.append(("answer", self.sprinkle(self.words(1, 4), 0.2)))
            return render(items)
        out = []
        if r.random() < 0.05:
            out.append(r.choice([" ", "\n", "\r\n"]))
        out.append(f"<think>{self.reasoning()}</think>")
        nxt = "tool"
        for _ in range(n_calls):
            if nxt != "tool":
                out.append(r.choice(["\n", "\n", "\n\n", "", "\r\n", " "]))
            tool = r.choice(TOOLS)
            out.append(self.tool_call(tool))
            out.append(r.choice(PRE_OBS) + OPEN_TAG + r.choice(INNER_OPEN) + self.obs_body() + r.choice(INNER_CLOSE)
                       + CLOSE_TAG + r.choice(POST_OBS))
            nxt = r.choice(AFTER_OBS)
            if nxt in ("think", "reflection"):
                out.append(f"<{nxt}>{self.reasoning()}</{nxt}>")
            elif nxt == "text":
                out.append(self.sprinkle(self.words(1, 6), 0.2) + " ")
            elif nxt == "text_glued":  # model text right after '>' (one pre-token ">Now" under Qwen2's regex)
                out.append(r.choice(["Now", "ok", "结果", "😀 fine", "3 items", "'s", "Z"]) + " ")
            elif nxt == "answer":
                break
        out.append(r.choice(["", "\n", "\n\n", "\r\n"]) + f"<answer>{self.sprinkle(self.words(1, 4), 0.2)}</answer>")
        if r.random() < 0.1:
            out.append(r.choice(["\n", " ", "\n\n"]))
        return "".join(out)

    def question(self) -> str:
        r = self.rng
        q = r.choice(["What is", "Who founded", "Find", "Compute", "Which river flows through", "请问"]) + " "
        return q + self.sprinkle(self.words(2, 10), 0.1) + "?"


def broken_samples(gen: Gen, n: int) -> list[tuple[str, str]]:
    """``(text, expected drop reason)`` pairs that the 'tags' check (or the masker) must drop."""
    out = []
    kinds = ["unclosed_observation", "stray_closing_observation", "nested_tag", "unclosed_tag", "stray_closing_tag"]
    while len(out) < n:
        t = gen.trajectory()
        kind = kinds[len(out) % len(kinds)]
        if kind == "unclosed_observation":  # cut before the last closing tag
            t = t[: t.rindex(CLOSE_TAG)]
        elif kind == "stray_closing_observation":  # outside any block (inside <think> it would be nested_tag)
            t = CLOSE_TAG + "\n" + t
        elif kind == "nested_tag":
            t = t.replace("<think>", "<think> maybe <answer>x</answer> ", 1)
        elif kind == "unclosed_tag":
            t = t + "\n<plan> and then"
        else:
            t = "</plan>\n" + t
        out.append((t, kind))
    return out


def convert(questions: list[str], responses: list[list[str]]) -> dict[str, list]:
    """A batch in LLaMA-Factory's converted format (see llamafactory/data/converter.py)."""
    n = len(questions)
    return {
        "_prompt": [[{"role": "user", "content": q}] for q in questions],
        "_response": [[{"role": "assistant", "content": t} for t in rs] for rs in responses],
        "_system": [""] * n,
        "_tools": [""] * n,
        "_images": [None] * n,
        "_videos": [None] * n,
        "_audios": [None] * n,
    }


def batched(questions: list[str], responses: list[list[str]], size: int) -> list[dict[str, list]]:
    return [convert(questions[i : i + size], responses[i : i + size]) for i in range(0, len(questions), size)]


# ----------------------------------------------------------------------------------------------------------
# LLaMA-Factory objects


def build_tokenizer_dir(out: Path, seed: int, kind: str = "tiny") -> Path:
    if kind == "qwen2.5":  # the 151k vocabulary users train with, built offline from dashscope's BPE ranks
        from afm.offline.qwen_tokenizer import build_qwen25_tokenizer

        t0 = time.perf_counter()
        path = build_qwen25_tokenizer(out / "qwen2.5_tokenizer")
        print(f"Qwen2.5-compatible tokenizer in {path} ({time.perf_counter() - t0:.1f}s, built once then reused)")
        return path
    model_dir = out / "tiny_model"
    if (model_dir / "tokenizer.json").exists() and (model_dir / "config.json").exists():
        print(f"reusing tiny model/tokenizer in {model_dir}")
        return model_dir
    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import build_tiny_model

    gen = Gen(seed + 1000)  # a few synthetic trajectories so BPE learns merges across tags and whitespace
    texts = tokenizer_corpus() + [gen.trajectory() for _ in range(300)]
    t0 = time.perf_counter()
    build_tiny_model(model_dir, texts)
    print(f"built tiny model/tokenizer in {model_dir} ({time.perf_counter() - t0:.1f}s)")
    return model_dir


@dataclass
class LF:
    tokenizer: object
    template: object
    processor: object

    def make(self, cls: type, ignore_observation: bool, cutoff_len: int):
        from afm.sft.overlay import AfmDataArguments

        args = AfmDataArguments(template="qwen", cutoff_len=cutoff_len, ignore_observation=ignore_observation,
                                ignore_observation_check=getattr(self, "check", "observation"))
        return cls(template=self.template, tokenizer=self.tokenizer, processor=self.processor, data_args=args)


def load_lf(model_dir: Path) -> LF:
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import ModelArguments
    from llamafactory.model import load_tokenizer

    from afm.sft.overlay import AfmDataArguments

    module = load_tokenizer(ModelArguments(model_name_or_path=str(model_dir)))
    tokenizer = module["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, AfmDataArguments(template="qwen"))
    return LF(tokenizer, template, module["processor"])


# ----------------------------------------------------------------------------------------------------------
# timing


@dataclass
class Packed:
    """Compact copy of processor outputs (numpy), so timing passes do not carry millions of live ints."""

    ids: dict[str, list[np.ndarray]]

    @classmethod
    def of(cls, outs: list[dict[str, list]], keys: tuple[str, ...]) -> Packed:
        d = {k: [] for k in keys}
        for o in outs:
            for k in keys:
                d[k].extend(np.asarray(x, dtype=np.int64) for x in o.get(k, []))
        return cls(d)


def timed_pass(proc, batches: list[dict], stats_dir: str | None) -> tuple[float, list[dict]]:
    from afm.sft.stats import STATS_DIR_ENV

    if stats_dir is not None:  # what loader._get_preprocessed_dataset does around datasets.map
        os.environ[STATS_DIR_ENV] = stats_dir
    gc.collect()
    t0 = time.perf_counter()
    outs = [proc.preprocess_dataset(b) for b in batches]
    dt = time.perf_counter() - t0
    os.environ.pop(STATS_DIR_ENV, None)
    return dt, outs


def bench(name: str, stock, masked, batches: list[dict], rounds: int, keys: tuple[str, ...], token_keys: tuple[str, ...]):
    """Alternate stock/masked passes; return (stock Packed, masked Packed, report, figures dict)."""
    from afm.sft.stats import collect_stats

    times: dict[str, list[float]] = {"stock": [], "masked": []}
    tokens: dict[str, int] = {}
    packed: dict[str, Packed] = {}
    report = None
    for rnd in range(rounds):
        order = ("stock", "masked") if rnd % 2 == 0 else ("masked", "stock")
        for which in order:
            proc = stock if which == "stock" else masked
            stats_dir = tempfile.mkdtemp(prefix="afm-bench-stats-") if which == "masked" else None
            dt, outs = timed_pass(proc, batches, stats_dir)
            times[which].append(dt)
            tokens[which] = sum(len(x) for o in outs for k in token_keys for x in o[k])
            if rnd == 0:
                packed[which] = Packed.of(outs, keys)
                if stats_dir is not None:
                    report, _ = collect_stats(stats_dir)
            if stats_dir is not None:
                shutil.rmtree(stats_dir, ignore_errors=True)
            del outs
            gc.collect()
            print(f"  [{name}] round {rnd + 1}/{rounds} {which:6s} {dt:7.2f}s  {tokens[which] / dt:12,.0f} tok/s",
                  flush=True)
    med = {w: statistics.median(ts) for w, ts in times.items()}
    tps = {w: tokens[w] / med[w] for w in med}
    fig = {
        "stock_s": med["stock"], "masked_s": med["masked"], "stock_tok": tokens["stock"], "masked_tok": tokens["masked"],
        "stock_tps": tps["stock"], "masked_tps": tps["masked"],
        # same examples, so compare wall time (= tokens/s on the stock token count)
        "ratio": med["stock"] / med["masked"],
        # on a shared machine the fastest pass of each is the least disturbed one: a second, less noisy estimate
        "ratio_best": min(times["stock"]) / min(times["masked"]),
        "rounds": {w: [round(t, 3) for t in ts] for w, ts in times.items()},
    }
    return packed["stock"], packed["masked"], report, fig


# ----------------------------------------------------------------------------------------------------------
# the oracle (independent of afm.sft.masking / afm.trajectory.spans)


def oracle_spans(text):
    """``(pad_start, core_start, core_end, pad_end, closed)`` of each observation in ``text`` (str or bytes)."""
    is_bytes = isinstance(text, bytes)
    open_t, close_t = (OPEN_TAG.encode(), CLOSE_TAG.encode()) if is_bytes else (OPEN_TAG, CLOSE_TAG)
    ws = ASCII_WS.encode() if is_bytes else ASCII_WS
    n = len(text)
    spans = []
    pos = 0
    while True:
        cs = text.find(open_t, pos)
        if cs < 0:
            return spans
        close = text.find(close_t, cs + len(open_t))  # the first closing tag ends it, whatever is inside
        closed = close >= 0
        ce = close + len(close_t) if closed else n
        s = cs
        while s > 0 and text[s - 1 : s] in ws:
            s -= 1
        e = ce
        while closed and e < n and text[e : e + 1] in ws:
            e += 1
        spans.append((s, cs, ce, e, closed))
        pos = ce


def expected_mask(starts: np.ndarray, ends: np.ndarray, spans) -> np.ndarray:
    """Per token: overlaps a core, or lies entirely within core + padding."""
    m = np.zeros(len(starts), dtype=bool)
    for s, cs, ce, e, _ in spans:
        m |= (starts < ce) & (ends > cs)
        m |= (starts >= s) & (ends <= e)
    return m


_BYTE_OF_CHAR: dict[str, int] | None = None


def _byte_of_char() -> dict[str, int]:
    """GPT-2 byte-level alphabet, printable char -> byte (written out here, not imported)."""
    global _BYTE_OF_CHAR
    if _BYTE_OF_CHAR is None:
        keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
        mapping = {chr(b): b for b in keep}
        extra = 0
        for b in range(256):
            if b not in keep:
                mapping[chr(256 + extra)] = b
                extra += 1
        _BYTE_OF_CHAR = mapping
    return _BYTE_OF_CHAR


def byte_ranges(tokenizer, ids: list[int]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Fallback: per-token byte ranges by decoding each token's byte-level string."""
    table = _byte_of_char()
    specials = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    pieces = []
    for i, tok in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True):
        pieces.append(specials[i].encode() if i in specials else bytes(table[c] for c in tok))
    lens = np.array([len(p) for p in pieces], dtype=np.int64)
    ends = np.cumsum(lens)
    return b"".join(pieces), ends - lens, ends


@dataclass
class Tally:
    samples: int = 0
    target: int = 0
    masked_expected: int = 0
    masked_got: int = 0
    wrong: int = 0
    wrong_samples: int = 0
    fallback: int = 0
    unexpected_drops: int = 0
    unexpected_keeps: int = 0
    mixed: int = 0
    kinds: dict = field(default_factory=dict)  # what the wrong tokens / unexpected keeps were
    kind_example: dict = field(default_factory=dict)
    examples: list = field(default_factory=list)

    def note(self, kind: str, example: str = "") -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.kind_example.setdefault(kind, example)


def token_ranges(tokenizer, text: str, run_ids: np.ndarray, enc: dict | None):
    """(spans, starts, ends, used_fallback) for the trained run whose text is ``text`` (or a prefix of it)."""
    if enc is None:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    k = len(run_ids)
    if len(ids) >= k and np.array_equal(np.asarray(ids[:k]), run_ids):
        off = np.asarray(enc["offset_mapping"][:k], dtype=np.int64).reshape(-1, 2)
        return oracle_spans(text), off[:, 0], off[:, 1], False
    blob, starts, ends = byte_ranges(tokenizer, run_ids.tolist())
    # bytes the run decodes to; spans on the full text (as bytes) when the run is its prefix, else on the run
    full = text.encode()
    ref = full if full.startswith(blob) else blob
    return oracle_spans(ref), starts, ends, True


def check_row(t: Tally, tokenizer, text: str, ids: np.ndarray, stock_labels: np.ndarray,
              masked_labels: np.ndarray | None, enc: dict | None, where: str) -> None:
    """Compare one processed row with the oracle. ``masked_labels`` None means the masked processor dropped it."""
    t.samples += 1
    trained = stock_labels != IGNORE
    idx = np.flatnonzero(trained)
    a, b = int(idx[0]), int(idx[-1]) + 1
    assert trained[a:b].all(), "one contiguous trained run expected (single-turn qwen)"
    run = ids[a:b]
    spans, starts, ends, fb = token_ranges(tokenizer, text, run, enc)
    t.fallback += fb
    cut = int(ends[-1])
    expect_drop = any(cs < cut < ce for _, cs, ce, _, _ in spans)
    if masked_labels is None:
        if not expect_drop:
            t.unexpected_drops += 1
            if len(t.examples) < 6:
                t.examples.append(f"{where}: dropped but nothing is cut inside an observation")
        return
    if expect_drop:
        t.unexpected_keeps += 1
        partial_open = any(cs < cut < cs + len(OPEN_TAG) for _, cs, _, _, _ in spans)
        t.note("kept: run ends inside an opening <observation> tag" if partial_open
               else "kept: run ends inside an observation body", f"{where}: run ends with {text[max(0, cut - 40):cut]!r}")
        if len(t.examples) < 6:
            t.examples.append(f"{where}: kept though the label run ends inside an observation core "
                              f"(run ends with {text[max(0, cut - 30):cut]!r})")
    exp = expected_mask(starts, ends, spans)
    got = masked_labels[a:b] == IGNORE
    outside = np.concatenate([masked_labels[:a], masked_labels[b:]]), np.concatenate([stock_labels[:a], stock_labels[b:]])
    assert np.array_equal(*outside), "masking changed labels outside the trained run"
    assert np.array_equal(masked_labels[a:b][~got], run[~got]), "masking changed a trained label"
    t.target += b - a
    t.masked_expected += int(exp.sum())
    t.masked_got += int(got.sum())
    for s, cs, ce, e, _ in spans:
        sel = (starts < ce) & (ends > cs)
        t.mixed += int((sel & ((starts < s) | (ends > e))).sum())
    bad = np.flatnonzero(exp != got)
    ref = text if not fb else text.encode()
    for j in bad:
        a_j, b_j = int(starts[j]), int(ends[j])
        tok = tokenizer.convert_ids_to_tokens([int(run[j])])[0]
        ex = (f"{where}: token {j} of the response, id {int(run[j])} {tok!r}, chars {a_j}:{b_j} = {ref[a_j:b_j]!r}, "
              f"run cut at char {cut}; context {ref[max(0, a_j - 40):b_j + 40]!r}")
        if exp[j] and any(cs >= cut and s <= a_j and b_j <= cs for s, cs, _, _, _ in spans):
            t.note("trained: padding before an observation that the cut removed", ex)
        elif exp[j] and any(cs < cut < ce and ((a_j < ce and b_j > cs) or (s <= a_j and b_j <= cs))
                            for s, cs, ce, _, _ in spans):
            t.note("trained: part of (or padding before) an observation cut open by the truncation", ex)
        else:
            t.note(f"{'trained' if exp[j] else 'masked'} against the rule", ex)
    if len(bad):
        t.wrong += len(bad)
        t.wrong_samples += 1
        if len(t.examples) < 6:
            j = int(bad[0])
            ref = text if not fb else text.encode()
            tok = tokenizer.convert_ids_to_tokens([int(run[j])])[0]
            t.examples.append(
                f"{where}: token {j} of the response (id {int(run[j])} {tok!r}, chars {int(starts[j])}:{int(ends[j])}"
                f" = {ref[starts[j]:ends[j]]!r}) expected {'masked' if exp[j] else 'trained'}, got "
                f"{'masked' if got[j] else 'trained'}; context {ref[max(0, starts[j] - 40):ends[j] + 40]!r}; "
                f"{len(bad)} wrong in this sample")


def oracle_over(tally: Tally, tokenizer, texts: list[str], stock: list[np.ndarray], stock_ids: list[np.ndarray],
                masked: list[np.ndarray], masked_ids: list[np.ndarray], label: str, chunk: int = 512) -> None:
    """All rows of one label slot; rows the masked processor dropped are matched by input_ids, in order."""
    j = 0
    for c0 in range(0, len(texts), chunk):
        body = [t + "<|im_end|>\n" for t in texts[c0 : c0 + chunk]]  # qwen format_assistant: {{content}}<|im_end|>\n
        encs = tokenizer(body, add_special_tokens=False, return_offsets_mapping=True)
        for k, text in enumerate(body):
            i = c0 + k
            enc = {"input_ids": encs["input_ids"][k], "offset_mapping": encs["offset_mapping"][k]}
            kept = j < len(masked_ids) and np.array_equal(masked_ids[j], stock_ids[i])
            check_row(tally, tokenizer, text, stock_ids[i], stock[i], masked[j] if kept else None, enc, f"{label}#{i}")
            j += kept
    assert j == len(masked_ids), "masked rows that match no stock row"


# ----------------------------------------------------------------------------------------------------------
# sections


def section_truncation(lf: LF, gen_texts: list[str], questions: list[str], n_probes: int, seed: int) -> Tally:
    """Cut label runs by cutoff_len at random positions and right around observation boundaries."""
    from llamafactory.data.processor import SupervisedDatasetProcessor as SDP

    rng = random.Random(seed + 7)
    stock = lf.make(SDP, False, 10**6)
    masked = lf.make(SDP, True, 10**6)
    tok = lf.tokenizer
    tally = Tally()
    cats = {"random": 0, "near_open": 0, "near_close": 0}
    for p in range(n_probes):
        i = rng.randrange(len(gen_texts))
        text = gen_texts[i] + "<|im_end|>\n"
        batch = convert([questions[i]], [[gen_texts[i]]])
        full = stock.preprocess_dataset(batch)
        source_len = full["labels"][0].count(IGNORE)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        off = enc["offset_mapping"]
        spans = oracle_spans(text)
        kind = rng.choice(["random", "near_open", "near_close"]) if spans else "random"
        if kind == "random":
            k = rng.randint(1, len(off) - 1)
        else:
            sp = rng.choice(spans)
            anchor = sp[1] if kind == "near_open" else sp[2]
            t0 = next((q for q, (a, b) in enumerate(off) if b > anchor), len(off) - 1)
            k = t0 + rng.randint(-3, 3)
        k = min(max(k, source_len + 1), len(off) - 1)  # cutoff_len = source + k keeps k response tokens
        if k <= source_len:
            continue
        cats[kind] += 1
        stock.data_args.cutoff_len = masked.data_args.cutoff_len = source_len + k
        s_out = stock.preprocess_dataset(batch)
        m_out = masked.preprocess_dataset(batch)
        ids = np.asarray(s_out["input_ids"][0])
        m_labels = np.asarray(m_out["labels"][0]) if m_out["labels"] else None
        check_row(tally, tok, text, ids, np.asarray(s_out["labels"][0]), m_labels, enc, f"trunc#{p}(sample {i}, k={k})")
    print(f"  probes by kind: {cats}")
    return tally


def masked_with_report(proc, batch: dict) -> tuple[dict, object]:
    """Run the masked processor on one batch and collect afm's MaskReport for it."""
    from afm.sft.stats import STATS_DIR_ENV, collect_stats

    stats_dir = tempfile.mkdtemp(prefix="afm-bench-stats-")
    os.environ[STATS_DIR_ENV] = stats_dir
    try:
        out = proc.preprocess_dataset(batch)
        report, _ = collect_stats(stats_dir)
    finally:
        os.environ.pop(STATS_DIR_ENV, None)
        shutil.rmtree(stats_dir, ignore_errors=True)
    return out, report


def section_nfc(lf: LF) -> list[str]:
    """U+0338 after '>' composes under NFC (Qwen2's normaliser): '>' + U+0338 -> U+226F."""
    from llamafactory.data.processor import SupervisedDatasetProcessor as SDP

    masked = lf.make(SDP, True, 16384)
    stock = lf.make(SDP, False, 16384)
    head = "<think> a </think>\n<web_search>q</web_search>\n\n"
    cases = {
        "U+0338 first in an observation body": head + "<observation>\u0338secret tool output\n</observation>\n\n"
        "<answer>1</answer>",
        "U+0338 right after </observation>": head + "<observation>\nsecret tool output</observation>\u0338 next "
        "<answer>1</answer>",
        "U+0301 first in an observation body (no composition with '>')": head + "<observation>\u0301secret tool "
        "output\n</observation>\n\n<answer>1</answer>",
    }
    lines = []
    for name, text in cases.items():
        batch = convert(["q?"], [[text]])
        s = stock.preprocess_dataset(batch)
        m, report = masked_with_report(masked, batch)
        ids, labels = np.asarray(s["input_ids"][0]), np.asarray(s["labels"][0])
        run = ids[labels != IGNORE]
        body = text + "<|im_end|>\n"
        spans, starts, ends, _ = token_ranges(lf.tokenizer, body, run, None)
        expected = int(expected_mask(starts, ends, spans).sum())
        t = Tally()
        check_row(t, lf.tokenizer, body, ids, labels, np.asarray(m["labels"][0]) if m["labels"] else None, None, name)
        outcome = (f"dropped ({', '.join(report.drops)})" if not m["labels"]
                   else f"kept, {t.masked_got} of {t.target} label tokens masked")
        verdict = "OK" if not (t.wrong or t.unexpected_keeps or t.unexpected_drops) else "MISMATCH"
        lines.append(f"{verdict:8s} {name}: afm {outcome}; oracle expects it kept with {expected} of {len(run)} "
                     f"masked; the label tokens decode to {lf.tokenizer.decode(run.tolist())[40:100]!r}")
    return lines


def section_broken(lf: LF, gen: Gen, n: int) -> tuple[int, int, dict, dict]:
    from llamafactory.data.processor import SupervisedDatasetProcessor as SDP

    from afm.sft.stats import STATS_DIR_ENV, collect_stats

    masked = lf.make(SDP, True, 16384)
    masked.data_args.ignore_observation_check = "tags"  # the strict mode names every broken-tag reason
    pairs = broken_samples(gen, n)
    want: dict[str, int] = {}
    for _, reason in pairs:
        want[reason] = want.get(reason, 0) + 1
    stats_dir = tempfile.mkdtemp(prefix="afm-bench-stats-")
    os.environ[STATS_DIR_ENV] = stats_dir
    try:
        kept = 0
        for b in batched([f"q{i}?" for i in range(len(pairs))], [[t] for t, _ in pairs], 1000):
            kept += len(masked.preprocess_dataset(b)["input_ids"])
        report, _ = collect_stats(stats_dir)
    finally:
        os.environ.pop(STATS_DIR_ENV, None)
        shutil.rmtree(stats_dir, ignore_errors=True)
    return len(pairs), kept, want, dict(report.drops)


# ----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000, help="synthetic SFT samples (default 10000)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"), help="work folder (tiny model is cached here)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", choices=("tiny", "qwen2.5"), default="tiny",
                    help="tiny: the demo BPE (vocab 2048); qwen2.5: Qwen2.5's 151k vocabulary from the dashscope "
                    "wheel (afm.offline.qwen_tokenizer)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per processor (median reported)")
    ap.add_argument("--batch", type=int, default=1000, help="examples per preprocess_dataset call (datasets.map)")
    ap.add_argument("--cutoff-len", type=int, default=16384)
    ap.add_argument("--dpo-n", type=int, default=None, help="pairs for the DPO timing (default n/8; 0 skips)")
    ap.add_argument("--trunc-probes", type=int, default=1000, help="cutoff_len truncation probes (0 skips)")
    ap.add_argument("--broken", type=int, default=200, help="broken samples that must be dropped (0 skips)")
    args = ap.parse_args(argv)
    dpo_n = args.n // 8 if args.dpo_n is None else args.dpo_n

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    t_start = time.perf_counter()

    from afm.sft import overlay

    overlay.apply()
    overlay.apply()  # idempotent
    import llamafactory
    import torch
    import transformers
    from llamafactory.data.processor import PairwiseDatasetProcessor, SupervisedDatasetProcessor

    print(f"afm overlay fingerprint {overlay.OVERLAY_FINGERPRINT}  load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"python {platform.python_version()}  torch {torch.__version__}  transformers {transformers.__version__}  "
          f"llamafactory {llamafactory.__version__}  cpus {os.cpu_count()}  machine {platform.machine()}")
    args.out.mkdir(parents=True, exist_ok=True)
    lf = load_lf(build_tokenizer_dir(args.out, args.seed, args.tokenizer))
    print(f"tokenizer {type(lf.tokenizer).__name__} vocab {len(lf.tokenizer)}; template qwen; cutoff_len {args.cutoff_len}")

    t0 = time.perf_counter()
    gen = Gen(args.seed)
    texts = [gen.trajectory() for _ in range(args.n)]
    questions = [gen.question() for _ in range(args.n)]
    chars = sum(len(t) for t in texts)
    all_spans = [sp for t in texts for sp in oracle_spans(t)]
    n_obs = len(all_spans)
    n_long = sum(1 for sp in all_spans if sp[2] - sp[1] >= 1000)
    print(f"generated {args.n} trajectories in {time.perf_counter() - t0:.1f}s: {chars:,} chars, {n_obs} observations "
          f"({n_long} of >= 1000 chars), max {max(len(t) for t in texts):,} chars")

    # ---------------------------------------------------------------- SFT timing
    stock = lf.make(SupervisedDatasetProcessor, False, args.cutoff_len)
    masked = lf.make(SupervisedDatasetProcessor, True, args.cutoff_len)
    t0 = time.perf_counter()
    overlay._table(lf.tokenizer)  # one-time per process: the id -> bytes table (counted apart)
    print(f"token byte table built in {1000 * (time.perf_counter() - t0):.1f} ms (once per process)")
    batches = batched(questions, [[t] for t in texts], args.batch)
    warm = convert(questions[:50], [[t] for t in texts[:50]])
    stock.preprocess_dataset(warm)
    masked.preprocess_dataset(warm)
    print(f"SFT preprocess_dataset, {args.n} samples in batches of {args.batch}, {args.rounds} rounds:")
    keys = ("input_ids", "labels")
    s_pack, m_pack, report, sft = bench("sft", stock, masked, batches, args.rounds, keys, ("input_ids",))
    del batches
    longest = max(len(x) for x in s_pack.ids["input_ids"])

    # ---------------------------------------------------------------- SFT oracle
    t0 = time.perf_counter()
    tally = Tally()
    oracle_over(tally, lf.tokenizer, texts, s_pack.ids["labels"], s_pack.ids["input_ids"], m_pack.ids["labels"],
                m_pack.ids["input_ids"], "sft")
    t_oracle = time.perf_counter() - t0
    agree = (report.tokens_masked == tally.masked_got and report.tokens_target == tally.target)

    # ---------------------------------------------------------------- DPO
    dpo = None
    dtally = Tally()
    if dpo_n > 0:
        rgen = Gen(args.seed + 1)
        rejected = [rgen.trajectory() for _ in range(dpo_n)]
        pb = batched(questions[:dpo_n], [[c, r] for c, r in zip(texts[:dpo_n], rejected, strict=True)], args.batch)
        pstock = lf.make(PairwiseDatasetProcessor, False, args.cutoff_len)
        pmasked = lf.make(PairwiseDatasetProcessor, True, args.cutoff_len)
        pw = convert(questions[:20], [[c, r] for c, r in zip(texts[:20], rejected[:20], strict=True)])
        pstock.preprocess_dataset(pw)
        pmasked.preprocess_dataset(pw)
        print(f"DPO preprocess_dataset, {dpo_n} pairs in batches of {args.batch}, {args.rounds} rounds:")
        pkeys = ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels")
        ps, pm, _, dpo = bench("dpo", pstock, pmasked, pb, args.rounds, pkeys, ("chosen_input_ids", "rejected_input_ids"))
        del pb
        for side, side_texts in (("chosen", texts[:dpo_n]), ("rejected", rejected)):
            oracle_over(dtally, lf.tokenizer, side_texts, ps.ids[f"{side}_labels"], ps.ids[f"{side}_input_ids"],
                        pm.ids[f"{side}_labels"], pm.ids[f"{side}_input_ids"], f"dpo-{side}")

    # ---------------------------------------------------------------- probes
    broken = None
    if args.broken > 0:
        broken = section_broken(lf, Gen(args.seed + 2), args.broken)
    ttally = None
    if args.trunc_probes > 0:
        print(f"truncation probes ({args.trunc_probes}):")
        ttally = section_truncation(lf, texts, questions, args.trunc_probes, args.seed)
    nfc_lines = section_nfc(lf)

    # ---------------------------------------------------------------- report
    bar = "=" * 100
    print(bar)
    print(f"SFT  stock  (ignore_observation=False): {sft['stock_tps']:12,.0f} input tokens/s  "
          f"(median {sft['stock_s']:.2f}s for {sft['stock_tok']:,} tokens)")
    print(f"SFT  masked (ignore_observation=True) : {sft['masked_tps']:12,.0f} input tokens/s  "
          f"(median {sft['masked_s']:.2f}s for {sft['masked_tok']:,} tokens)")
    print(f"SFT  ratio masked/stock (throughput on the same examples): {sft['ratio']:.3f}  "
          f"(target >= 0.9: {'PASS' if sft['ratio'] >= 0.9 else 'FAIL'}); best pass vs best pass "
          f"{sft['ratio_best']:.3f}")
    if dpo:
        print(f"DPO  stock {dpo['stock_tps']:,.0f} tok/s, masked {dpo['masked_tps']:,.0f} tok/s, "
              f"ratio {dpo['ratio']:.3f}  (target >= 0.9: {'PASS' if dpo['ratio'] >= 0.9 else 'FAIL'}); best pass "
              f"vs best pass {dpo['ratio_best']:.3f}  ({dpo['stock_tok']:,} chosen+rejected tokens)")
    print(f"longest sample {longest} tokens (cutoff_len {args.cutoff_len}); "
          f"afm report: kept {report.samples_kept}/{report.samples_seen}, drops {report.drops or 'none'}, "
          f"target {report.tokens_target:,}, masked {report.tokens_masked:,}, mixed {report.tokens_mixed}, "
          f"observations {report.observations}")
    print(f"oracle ({t_oracle:.1f}s): {tally.samples} samples, {tally.target:,} label tokens, expected masked "
          f"{tally.masked_expected:,}, got masked {tally.masked_got:,}, boundary tokens with model text "
          f"{tally.mixed}; offset fallback used {tally.fallback}x; afm report agrees: {agree}")
    print(f"SFT  wrong tokens: {tally.wrong} of {tally.target}  (in {tally.wrong_samples} samples; unexpected drops "
          f"{tally.unexpected_drops}, unexpected keeps {tally.unexpected_keeps})")
    if dpo:
        print(f"DPO  wrong tokens: {dtally.wrong} of {dtally.target}  (chosen+rejected; unexpected drops "
              f"{dtally.unexpected_drops}, unexpected keeps {dtally.unexpected_keeps})")
    for tl, prefix in ((tally, "sft"), (dtally, "dpo")):
        for kind, cnt in sorted(tl.kinds.items()):
            print(f"   {cnt:6d}  {prefix} {kind}\n           e.g. {tl.kind_example[kind]}")
    for ex in tally.examples + dtally.examples:
        print("  ", ex)
    if broken:
        n_b, kept_b, want, got = broken
        ok = kept_b == 0 and want == got
        print(f"broken samples: {n_b}, kept {kept_b}; drop reasons {got} (expected {want}): {'OK' if ok else 'MISMATCH'}")
    if ttally:
        print(f"truncation probes: {ttally.samples} rows, wrong tokens {ttally.wrong} of {ttally.target}, unexpected "
              f"drops {ttally.unexpected_drops}, unexpected keeps {ttally.unexpected_keeps}")
        for kind, cnt in sorted(ttally.kinds.items()):
            print(f"   {cnt:6d}  {kind}\n           e.g. {ttally.kind_example[kind]}")
    print("NFC probes (U+0338 composes with '>' under the tokenizer's NFC normaliser):")
    for line in nfc_lines:
        print("  ", line)
    print(f"total runtime {time.perf_counter() - t_start:.0f}s; load average at end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (other processes on the machine skew the timings)")
    print(bar)
    failed = tally.wrong or tally.unexpected_drops or tally.unexpected_keeps or dtally.wrong or dtally.unexpected_drops
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
