"""The verl overlay (``verl[verl-core]==0.9.1``, never a fork): the ``afm_agent`` agent loop, the afm-tool adapter
for verl's tool yaml, and the model backend over verl's LLM server client.

verl is imported only inside this package, and only when a submodule is used: ``import afm.rl`` works without it.

* :class:`afm.rl.agent_loop.AfmAgentLoop` — declared in ``configs/verl/agent_loops.yaml``.
* :class:`afm.rl.tools.AfmVerlTool` — ``class_name`` of every entry in ``configs/verl/tools/*.yaml``.
* :class:`afm.rl.backend.VerlServerBackend` — :class:`afm.agent.ModelBackend` over ``server_manager.generate``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AfmAgentLoop": "afm.rl.agent_loop",
    "select_tools": "afm.rl.agent_loop",
    "VerlServerBackend": "afm.rl.backend",
    "AfmVerlTool": "afm.rl.tools",
    "load_afm_tools": "afm.rl.tools",
    "shared_afm_tools": "afm.rl.tools",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'afm.rl' has no attribute {name!r}")
