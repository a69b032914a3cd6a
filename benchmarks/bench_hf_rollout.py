#!/usr/bin/env python
"""The ``hf`` rollout engine (``afm.rl.local.hf_engine``) on a GPU or the CPU: batched vs one-at-a-time decoding.

    python benchmarks/bench_hf_rollout.py [--device cuda] [--shape qwen2.5-0.5b] [--requests 64] [--prompt 256] [--new 128]
    python benchmarks/bench_hf_rollout.py --device cpu --shape tiny --requests 16 --new 32     # CPU smoke

A random-init Qwen2 model of the given shape (no weights are downloaded; the tokenizer is afm's tiny BPE, whose ids
all fall inside the model's vocabulary) serves ``--requests`` concurrent requests of ``--prompt`` random tokens and
``--new`` new tokens each (``ignore_eos``), first one at a time (the baseline: what a server without batching does),
then all at once (the engine batches them). Both runs use the same engine object in the same process. Before timing,
a correctness check: with float32 weights, batched greedy decoding of prompts of different lengths must give the
same ids as an unbatched, cache-free greedy loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SHAPES = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True),
}


def build(out: Path, shape: str) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import train_tokenizer

    if (out / "config.json").exists():
        return out
    train_tokenizer(tokenizer_corpus(0), out, vocab_size=2048)
    tok = AutoTokenizer.from_pretrained(out)
    cfg = dict(SHAPES[shape])
    cfg.setdefault("vocab_size", len(tok))
    config = Qwen2Config(**cfg, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


def check_exact(model_dir: Path, device: str) -> bool:
    """Batched greedy (float32) equals an unbatched cache-free greedy loop, for prompts of different lengths."""
    import torch

    from afm.rl.local.hf_engine import HFEngine

    eng = HFEngine(str(model_dir), device=device, dtype="float32", max_model_len=512)
    rng = random.Random(1)
    top = min(len(eng.tokenizer), eng.model.config.vocab_size)
    prompts = [[rng.randrange(3, top) for _ in range(n)] for n in (5, 17, 40)]

    async def go():
        return await asyncio.gather(*[eng.generate(p, {"max_tokens": 8, "temperature": 0, "ignore_eos": True})
                                      for p in prompts])

    results = asyncio.run(go())
    ok = True
    with torch.no_grad():
        for p, res in zip(prompts, results, strict=True):
            ids = list(p)
            for _ in range(8):
                logits = eng.model(input_ids=torch.tensor([ids], device=device)).logits[0, -1]
                ids.append(int(logits.argmax()))
            ok &= ids[len(p):] == res.ids
    return ok


def timed(eng, prompts, new: int, concurrent: bool) -> float:
    params = {"max_tokens": new, "temperature": 1.0, "ignore_eos": True}

    async def one_by_one():
        for p in prompts:
            await eng.generate(p, params)

    async def all_at_once():
        await asyncio.gather(*[eng.generate(p, params) for p in prompts])

    t0 = time.perf_counter()
    asyncio.run(all_at_once() if concurrent else one_by_one())
    if eng.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "hf_rollout")
    args = ap.parse_args()
    import torch

    from afm.rl.local.hf_engine import HFEngine

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device; use --device cpu --shape tiny for a smoke run")
        return 77
    tiny = build(Path(tempfile.mkdtemp()) / "tiny", "tiny")
    exact = check_exact(tiny, args.device)
    model = build(args.out / args.shape, args.shape)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    eng = HFEngine(str(model), device=args.device, dtype=dtype, max_model_len=args.prompt + args.new + 8,
                   max_batch_size=max(args.requests, 1))
    rng = random.Random(0)
    top = min(len(eng.tokenizer), eng.model.config.vocab_size)
    prompts = [[rng.randrange(3, top) for _ in range(args.prompt)] for _ in range(args.requests)]
    timed(eng, prompts[:2], 4, True)  # warm-up (kernels, allocator)
    seq_n = max(1, min(args.requests, 8))  # one at a time is slow: time a subset and scale per request
    t_seq = timed(eng, prompts[:seq_n], args.new, False) / seq_n * args.requests
    t_bat = timed(eng, prompts, args.new, True)
    tokens = args.requests * args.new
    res = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "shape": args.shape,
           "dtype": dtype, "requests": args.requests, "prompt_tokens": args.prompt, "new_tokens": args.new,
           "exact_batched_greedy_fp32": exact, "sequential_tok_s": tokens / t_seq, "batched_tok_s": tokens / t_bat,
           "speedup": t_seq / t_bat, "torch": torch.__version__,
           "transformers": __import__("transformers").__version__}
    print(json.dumps(res, indent=2))
    print(f"{args.shape} on {res['device']} ({dtype}): batched {res['batched_tok_s']:.0f} tok/s vs one at a time "
          f"{res['sequential_tok_s']:.0f} tok/s ({res['speedup']:.1f}x); batched greedy exact: {exact}")
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
