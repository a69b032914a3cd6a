"""The tool registry refuses to silently swap the class behind a tag name."""

from __future__ import annotations

import pytest

from afm.tools import TOOL_CLASSES, build_tool, register_tool
from afm.tools.base import Tool, ToolContext, ToolResult


class EchoTool(Tool):
    name = "echo_test"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        return ToolResult(body, "ok", 0.0, {})


class OtherEcho(EchoTool):
    pass


@pytest.fixture
def clean_registry():
    saved = dict(TOOL_CLASSES)
    yield
    TOOL_CLASSES.clear()
    TOOL_CLASSES.update(saved)


def test_registering_a_taken_name_raises(clean_registry):
    register_tool("echo_test", EchoTool)
    register_tool("echo_test", EchoTool)  # the same class again: a no-op
    register_tool("echo_test", f"{__name__}:EchoTool")  # its path: the same target
    with pytest.raises(ValueError, match=r"tool 'echo_test' is already registered as .*:EchoTool; refusing"):
        register_tool("echo_test", OtherEcho)
    assert type(build_tool("echo_test")) is EchoTool
    with pytest.raises(ValueError, match=r"'code' is already registered as afm\.tools\.code:CodeTool"):
        register_tool("code", EchoTool)  # a built-in tool is protected too
    register_tool("echo_test", OtherEcho, replace=True)  # on purpose
    assert type(build_tool("echo_test")) is OtherEcho


def test_a_target_must_name_a_class(clean_registry):
    with pytest.raises(ValueError, match="give a Tool subclass or a 'module:Class' path"):
        register_tool("echo_test", "afm.tools.code")
