"""System prompts for Chain-of-Agents models: versioned, selectable by key, written afresh by afm.

>>> from afm.prompts import get_prompt, build_messages, stop_strings_for
>>> p = get_prompt("mhqa")
>>> stop_strings_for(p)
['</wiki_search>', '</answer>']
>>> build_messages(p, "Who founded Velmora?")[0]["content"].endswith("Question: Who founded Velmora?")
True

Built-in keys: ``web_agent``, ``afm_all_tools``, ``mhqa``, ``code_agent``, ``math_agent``, ``search_r1``.
Add your own with :func:`register_prompt` or :func:`load_prompt_file`.
"""

from afm.prompts.all_tools import AFM_ALL_TOOLS
from afm.prompts.code_agent import CODE_AGENT
from afm.prompts.math_agent import MATH_AGENT
from afm.prompts.mhqa import MHQA
from afm.prompts.registry import (
    START,
    STYLES,
    Prompt,
    build_messages,
    check_prompt,
    get_prompt,
    list_prompts,
    load_prompt_file,
    register_prompt,
    save_prompt_file,
    sequence_problems,
    stop_strings_for,
    unregister_prompt,
)
from afm.prompts.search_r1 import SEARCH_R1, SEARCH_R1_TAGS
from afm.prompts.web_agent import WEB_AGENT

BUILTIN_PROMPTS: tuple[Prompt, ...] = (WEB_AGENT, AFM_ALL_TOOLS, MHQA, CODE_AGENT, MATH_AGENT, SEARCH_R1)
for _prompt in BUILTIN_PROMPTS:
    register_prompt(_prompt)

__all__ = [
    "AFM_ALL_TOOLS",
    "BUILTIN_PROMPTS",
    "CODE_AGENT",
    "MATH_AGENT",
    "MHQA",
    "SEARCH_R1",
    "SEARCH_R1_TAGS",
    "START",
    "STYLES",
    "WEB_AGENT",
    "Prompt",
    "build_messages",
    "check_prompt",
    "get_prompt",
    "list_prompts",
    "load_prompt_file",
    "register_prompt",
    "save_prompt_file",
    "sequence_problems",
    "stop_strings_for",
    "unregister_prompt",
]
