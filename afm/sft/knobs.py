"""Moved to :mod:`afm.launch.sft` (the SFT/DPO settings, declared once, and their launch); kept so that
``python -m afm.sft.knobs`` and old imports still work."""

import sys

from afm.launch.sft import *  # noqa: F403
from afm.launch.sft import main

if __name__ == "__main__":
    sys.exit(main())
