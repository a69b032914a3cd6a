"""Moved to :mod:`afm.launch` (values: how knobs read; command: the logged run). Kept only for afm/quickstart.py's
``parse_bool`` import (the RL launcher reads afm.launch directly); remove it when the quickstart imports
afm.launch.values."""

from afm.launch.command import run_logged, shell_status
from afm.launch.values import KnobError, is_int, is_number, is_posint, is_uint, parse_bool, split_list

__all__ = ["KnobError", "is_int", "is_number", "is_posint", "is_uint", "parse_bool", "run_logged", "shell_status",
           "split_list"]
