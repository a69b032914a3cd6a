"""The ``code`` tool: run the Python in a ``<code>`` body in the sandbox and describe the result.

Body format (what the models were trained on): one or more ```` ```py ```` / ```` ```python ```` blocks (joined
with a blank line), optionally ```` ```sh ```` / ```` ```bash ```` blocks whose content is fed as stdin; a body
without fences runs as-is when it parses as Python. Observations keep the original wording: ``[EXECUTED] Code
exited with status 0.`` + ``[STDOUT:BEGIN]…[STDOUT:END]``, ``[FAILED] Code exited with status K.`` + stderr/stdout
blocks, and the timeout hint. Long streams keep their head and tail around a truncation marker.

Config keys (``configs/tools/code_executor.yaml``): ``timeout`` (s), ``memory_limit`` (bytes; ``"10*1024**3"``,
``"1GiB"`` and ``"512MB"`` also accepted), ``max_obs_length`` (characters per stream), ``nsjail_path``, ``mode``
(oneshot|pool), and ``sandbox`` (any :class:`afm.sandbox.SandboxConfig` field).
"""

from __future__ import annotations

import ast
import asyncio
import re
import time
from collections.abc import Mapping
from typing import Any

from afm.sandbox import Limits, Sandbox, SandboxConfig, SandboxUnavailable
from afm.sandbox.limits import ExecResult
from afm.tools.base import Tool, ToolContext, ToolResult

PY_BLOCK = re.compile(r"```(?:py|python|python3)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
STDIN_BLOCK = re.compile(r"```(?:sh|bash|stdin|text)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
BARE_BLOCK = re.compile(r"```[ \t]*\n(.*?)```", re.DOTALL)
TIMEOUT_HINT = "Time out. Check for infinite loops, blocked I/O (e.g., input()), or deadlocks."
NO_CODE_HINT = ("No Python code found. Put the program in a fenced block inside the tag: <code>\n```py\n"
                "print('hello')\n```\n</code> (optionally a ```sh block with the program's stdin).")
ANSWER_HINT = " If you already have the final answer, write it inside <answer></answer> instead."


def parse_memory(value: Any) -> int:
    """Bytes from an int, ``"10*1024**3"``, ``"1GiB"``, ``"512MB"`` (the original's yaml used arithmetic)."""
    if isinstance(value, bool):
        raise ValueError(f"memory_limit must be a size, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?)", text, re.IGNORECASE)
    if m:
        unit = m.group(2).upper().rstrip("B").rstrip("I")
        return int(float(m.group(1)) * 1024 ** "KMGT".index(unit) * 1024)
    if re.fullmatch(r"[\d\s*+()]+", text):  # arithmetic of integers only: safe to evaluate as a literal tree
        return int(_eval_int(ast.parse(text, mode="eval").body))
    raise ValueError(f"cannot read memory_limit {value!r}; use bytes, '10*1024**3', '1GiB' or '512MB'")


def _eval_int(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow, ast.Add)):
        left, right = _eval_int(node.left), _eval_int(node.right)
        if isinstance(node.op, ast.Pow):
            if right > 64:
                raise ValueError("exponent too large")
            return left**right
        return left * right if isinstance(node.op, ast.Mult) else left + right
    raise ValueError("unsupported expression")


def parse_code_body(body: str) -> tuple[str | None, str, str | None]:
    """``(code, stdin, problem)``: the program, its stdin, or ``code=None`` and a message for the model."""
    blocks = [b.strip("\n") for b in PY_BLOCK.findall(body)]
    stdin = "\n".join(b.strip("\n") for b in STDIN_BLOCK.findall(body))
    if not blocks:
        bare = [b.strip("\n") for b in BARE_BLOCK.findall(body)]
        candidates = bare or [body.strip()]
        for cand in candidates:
            if cand.strip() and _parses(cand):
                blocks = [cand]
                break
    if not blocks or not any(b.strip() for b in blocks):
        hint = NO_CODE_HINT
        if re.search(r"final", body, re.I) and re.search(r"answer", body, re.I):
            hint += ANSWER_HINT
        return None, stdin, hint
    code = "\n\n".join(blocks)
    if stdin and not stdin.endswith("\n"):
        stdin += "\n"
    return code, stdin, None


def _parses(code: str) -> bool:
    # The policy writes the body: 5 KB of nesting ("-----1") makes the parser raise RecursionError or MemoryError,
    # which is "not Python" like any syntax error, never a crashed rollout.
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of ``text`` around a marker so that it fits in ``limit`` characters."""
    if limit <= 0 or len(text) <= limit:
        return text
    marker = f"\n..._This content has been truncated to stay below {limit} characters_...\n"
    keep = max(0, limit - len(marker))
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head):]


def format_observation(res: ExecResult, max_chars: int, limits: Limits) -> str:
    """The observation text for one execution (original wording, see the module docstring)."""
    out = truncate_middle(res.stdout.rstrip("\n"), max_chars)
    err = truncate_middle(res.stderr.rstrip("\n"), max_chars)
    out_block = f"[STDOUT:BEGIN]\n{out}\n[STDOUT:END]"
    err_block = f"[STDERR:BEGIN]\n{err}\n[STDERR:END]"
    if res.status == "ok":
        if not out:
            return "[EXECUTED] Code exited with status 0 (no output)."
        return f"[EXECUTED] Code exited with status 0.\n{out_block}"
    if res.status == "timeout":
        return TIMEOUT_HINT + (f"\n{out_block}" if out else "")
    if res.status == "sandbox_error":
        return ("[FAILED] The code could not be run because the sandbox failed (not a problem with the code); "
                "try again.")
    head = f"[FAILED] Code exited with status {res.exit_code}"
    if res.status == "memory":
        head = f"[FAILED] Memory limit exceeded ({limits.memory_mb} MB); code exited with status {res.exit_code}"
    elif res.status == "output_limit":
        head = (f"[FAILED] Output limit exceeded ({limits.output_bytes} bytes); the program was stopped. "
                "Print less")
    if out and err:
        return f"{head} with mixed output:\n{out_block}\n{err_block}"
    if err:
        return f"{head}.\n{err_block}"
    if out:
        return f"{head}.\n{out_block}"
    return f"{head}."


class CodeTool(Tool):
    """Runs ``<code>`` bodies in a shared :class:`~afm.sandbox.Sandbox`, created on first use."""

    name = "code"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        cfg = dict(self.config)
        sandbox_cfg = dict(cfg.get("sandbox") or {})
        limits = dict(sandbox_cfg.pop("limits", {}) or {})
        if "timeout" in cfg:
            limits["wall_s"] = float(cfg["timeout"])
        if "memory_limit" in cfg:
            limits["memory_mb"] = max(16, parse_memory(cfg["memory_limit"]) // (1024 * 1024))
        if cfg.get("nsjail_path") and "nsjail_path" not in sandbox_cfg:
            sandbox_cfg["nsjail_path"] = cfg["nsjail_path"]
        if "mode" in cfg:
            sandbox_cfg["mode"] = cfg["mode"]
        sandbox_cfg["limits"] = limits
        self.sandbox_config = SandboxConfig.from_mapping(sandbox_cfg)
        self.max_obs_length = int(cfg.get("max_obs_length", 1536))
        self._sandbox: Sandbox | None = None
        self._sandbox_error: str | None = None
        self._lock = asyncio.Lock()

    async def _get_sandbox(self) -> Sandbox | None:
        async with self._lock:
            if self._sandbox is None and self._sandbox_error is None:
                try:
                    self._sandbox = await asyncio.to_thread(Sandbox, self.sandbox_config)
                except (SandboxUnavailable, RuntimeError) as exc:
                    self._sandbox_error = str(exc)
            return self._sandbox

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        t0 = time.monotonic()
        code, stdin, problem = parse_code_body(body)
        if code is None:
            return ToolResult(problem or NO_CODE_HINT, "error", time.monotonic() - t0, {"reason": "no_code"})
        sandbox = await self._get_sandbox()
        if sandbox is None:
            # Infrastructure, but a retry cannot help: the machine has no sandbox until it is set up.
            return ToolResult("[FAILED] The code could not be run: no sandbox is available on this machine.",
                              "error", time.monotonic() - t0, {"reason": "sandbox_unavailable",
                                                               "detail": self._sandbox_error, "retryable": False},
                              infra=True)
        res = await sandbox.arun(code, stdin)
        text = format_observation(res, self.max_obs_length, self.sandbox_config.limits)
        status = "ok" if res.status == "ok" else ("timeout" if res.status == "timeout" else "error")
        # The program's own failures (error, timeout, memory) are the model's; only the sandbox failing is not.
        return ToolResult(text, status, time.monotonic() - t0,
                          {"exec_status": res.status, "exit_code": res.exit_code, "wall_s": res.wall_s,
                           "cpu_s": res.cpu_s, "backend": res.backend}, infra=res.status == "sandbox_error")

    async def aclose(self) -> None:
        if self._sandbox is not None:
            await asyncio.to_thread(self._sandbox.close)
            self._sandbox = None
