"""Tests of the verl overlay: they run in the RL environment (`.venv-rl`, extra `rl`), which scripts/test.sh builds
and runs them in; in an environment without verl they are not collected."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") is not None else ["test_*.py"]
