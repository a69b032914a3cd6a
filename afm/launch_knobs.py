"""Moved to :mod:`afm.launch` (values: how knobs read; command: the logged run). Kept so that existing imports
(the RL launcher, the quickstart) still work."""

from afm.launch.command import run_logged, shell_status
from afm.launch.values import KnobError, is_int, is_number, is_posint, is_uint, parse_bool, split_list

__all__ = ["KnobError", "is_int", "is_number", "is_posint", "is_uint", "parse_bool", "run_logged", "shell_status",
           "split_list"]
