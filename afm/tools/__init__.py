"""Tools the agent calls by tag: web_search, crawl_page, wiki_search, code (see afm.tools.registry)."""

from afm.tools.base import Tool, ToolContext, ToolResult
from afm.tools.registry import TOOL_CLASSES, build_tool, load_tools_config, register_tool, tool_class

__all__ = ["TOOL_CLASSES", "Tool", "ToolContext", "ToolResult", "build_tool", "load_tools_config",
           "register_tool", "tool_class"]
