"""Isolated execution of untrusted Python (nsjail, bubblewrap fallback): one-shot jails or a warm pool."""

from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.runtime import SandboxUnavailable
from afm.sandbox.sandbox import Sandbox, SandboxConfig, arun, default_sandbox, run

__all__ = ["ExecResult", "Limits", "Sandbox", "SandboxConfig", "SandboxUnavailable", "arun", "default_sandbox",
           "run"]
