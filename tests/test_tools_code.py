"""The `code` tool: body parsing, observation texts, config keys (real sandbox)."""

from __future__ import annotations

import asyncio

import pytest

from afm.tools import ToolContext, load_tools_config
from afm.tools.code import CodeTool, parse_code_body, parse_memory, truncate_middle

FENCE = "```"


@pytest.fixture(scope="module")
def tool():
    t = CodeTool({"timeout": 2, "memory_limit": "512MB", "max_obs_length": 200})
    yield t
    asyncio.run(t.aclose())


def call(tool, body):
    async def go():
        result = await tool.call(body, ToolContext())
        await tool.aclose()  # the sandbox's thread pool belongs to this event loop run
        return result
    return asyncio.run(go())


def test_parse_code_body():
    body = f"{FENCE}py\nx = int(input())\n{FENCE}\nthen\n{FENCE}python\nprint(x * 2)\n{FENCE}\n{FENCE}sh\n21\n{FENCE}"
    code, stdin, problem = parse_code_body(body)
    assert code == "x = int(input())\n\nprint(x * 2)" and stdin == "21\n" and problem is None
    assert parse_code_body("print(1 + 1)")[0] == "print(1 + 1)"  # raw python that parses
    assert parse_code_body(f"{FENCE}\nprint(2)\n{FENCE}")[0] == "print(2)"
    code, _, problem = parse_code_body("I think the final answer is 42")
    assert code is None and "```py" in problem and "<answer>" in problem
    code, _, problem = parse_code_body("   ")
    assert code is None and "<answer>" not in problem


def test_observations_use_the_trained_wording(tool):
    r = call(tool, f"{FENCE}py\nprint(int(input()) * 2)\n{FENCE}\n{FENCE}sh\n21\n{FENCE}")
    assert r.status == "ok"
    assert r.text == "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"
    assert call(tool, "x = 1").text == "[EXECUTED] Code exited with status 0 (no output)."
    r = call(tool, "import sys\nprint('partial')\nsys.exit('bad input')")
    assert r.status == "error"
    assert r.text == ("[FAILED] Code exited with status 1 with mixed output:\n[STDOUT:BEGIN]\npartial\n"
                      "[STDOUT:END]\n[STDERR:BEGIN]\nbad input\n[STDERR:END]")
    r = call(tool, "1 / 0")
    assert r.text.startswith("[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\nTraceback")
    assert "ZeroDivisionError" in r.text
    assert not r.infra  # the program's own error is the model's, not the infrastructure's
    r = call(tool, "while True:\n    pass")
    assert r.status == "timeout" and r.text.startswith("Time out. Check for infinite loops") and not r.infra
    r = call(tool, "x = bytearray(2 ** 31)")
    assert r.text.startswith("[FAILED] Memory limit exceeded (512 MB)") and not r.infra
    r = call(tool, "no code here, final answer 3")
    assert r.status == "error" and r.meta["reason"] == "no_code" and not r.infra


def test_long_output_keeps_head_and_tail(tool):
    r = call(tool, "for i in range(1000):\n    print(i)")
    assert "0\n1\n2" in r.text and "998\n999" in r.text
    assert "truncated to stay below 200 characters" in r.text
    body = r.text.split("[STDOUT:BEGIN]\n")[1].split("\n[STDOUT:END]")[0]
    assert len(body) <= 200
    assert truncate_middle("abc", 10) == "abc"


def test_memory_limit_forms_and_yaml_config():
    assert parse_memory(10 * 1024**3) == parse_memory("10*1024**3") == parse_memory("10GiB") == 10 * 1024**3
    assert parse_memory("512MB") == 512 * 1024**2
    with pytest.raises(ValueError):
        parse_memory("__import__('os')")
    tools = load_tools_config("configs/tools/code_executor.yaml")
    code = tools["code"]
    assert isinstance(code, CodeTool)
    assert code.sandbox_config.limits.wall_s == 30 and code.sandbox_config.limits.memory_mb == 10 * 1024
    assert code.max_obs_length == 1536
    with pytest.raises(ValueError, match="unknown sandbox setting"):
        CodeTool({"sandbox": {"bakend": "nsjail"}})


def test_unavailable_sandbox_becomes_an_observation(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    t = CodeTool({"nsjail_path": str(tmp_path / "missing-nsjail")})
    r = call(t, "print(1)")
    assert r.status == "error" and "no sandbox is available" in r.text
    assert "nsjail" in r.meta["detail"]
    assert r.infra and r.meta["retryable"] is False  # the machine's failure; retrying cannot bring a sandbox


def test_afm_sandbox_cli(tmp_path):
    import subprocess
    import sys

    prog = tmp_path / "p.py"
    prog.write_text("print(input()[::-1])")
    (tmp_path / "in.txt").write_text("hello\n")
    run = subprocess.run([sys.executable, "-m", "afm.cli", "sandbox", "run", str(prog), "--stdin",
                          str(tmp_path / "in.txt")], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "olleh\n" and '"status": "ok"' in run.stderr
    check = subprocess.run([sys.executable, "-m", "afm.cli", "sandbox", "check", "--timeout", "2"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "sandbox check passed" in check.stdout and "FAIL" not in check.stdout


@pytest.mark.parametrize(("name", "expected"), [("web", ["web_search", "crawl_page"]), ("mhqa", ["wiki_search"]),
                                                ("code", ["code"]),
                                                ("afm", ["web_search", "crawl_page", "wiki_search", "code"])])
def test_verl_tool_configs_load_as_afm_tools(name, expected):
    # The same files drive verl (through afm.rl.tools.AfmVerlTool) and `afm infer --tools-config`.
    tools = load_tools_config(f"configs/verl/tools/{name}.yaml")
    assert list(tools) == expected
    assert all(tool.name == n for n, tool in tools.items())
    if "code" in tools:
        assert isinstance(tools["code"], CodeTool) and tools["code"].sandbox_config.limits.wall_s > 0
