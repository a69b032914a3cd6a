"""Entry point that torchrun workers execute (LLaMA-Factory's launcher re-runs ``launcher.__file__``).

``afm.sft.overlay.apply`` points ``llamafactory.launcher.__file__`` here, so every rank applies the overlay before
``run_exp`` parses arguments; otherwise workers would run stock LLaMA-Factory and reject ``ignore_observation``.
"""

import os
import sys

if __name__ == "__main__":
    # Run as a script, this file's folder is sys.path[0]; drop it so sibling modules cannot shadow top-level ones.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    from afm.sft.overlay import apply

    apply()
    from afm.sft.versions import check

    check()  # several processes: every rank runs the same afm, LLaMA-Factory, transformers and torch, or one line
    from afm.sft.trace import install

    install()  # AFM_SFT_TRACE_DIR: what each rank trained on and ended with (multi-node checks)
    from afm.sft.watchdog import install as watch

    watch()  # AFM_SFT_HANG_TIMEOUT: a rank that stops making progress stops the job with one line
    from llamafactory.train.tuner import run_exp

    run_exp()
