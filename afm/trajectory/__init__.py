"""The Chain-of-Agents trajectory format: one parser, renderer and validator used everywhere.

>>> from afm.trajectory import render, parse, last_answer, observation_spans
>>> text = render([("think", "add"), ("code", "```py\\nprint(2+2)\\n```"), ("observation", "4"), ("answer", "4")])
>>> last_answer(text)
'4'
"""

from afm.trajectory.parse import (
    OBSERVATION_PREFIX,
    OBSERVATION_SUFFIX,
    Problem,
    Segment,
    ToolCall,
    blocks,
    format_observation,
    last_answer,
    last_tool_call,
    pairing_problems,
    parse,
    render,
    tool_calls,
    validate,
)
from afm.trajectory.spans import ObservationSpan, find_observations, observation_spans
from afm.trajectory.tags import (
    DEFAULT_REGISTRY,
    Tag,
    TagKind,
    TagRegistry,
    register_tag,
    stop_strings,
    tool_tags,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "OBSERVATION_PREFIX",
    "OBSERVATION_SUFFIX",
    "ObservationSpan",
    "Problem",
    "Segment",
    "Tag",
    "TagKind",
    "TagRegistry",
    "ToolCall",
    "blocks",
    "find_observations",
    "format_observation",
    "last_answer",
    "last_tool_call",
    "observation_spans",
    "pairing_problems",
    "parse",
    "register_tag",
    "render",
    "stop_strings",
    "tool_calls",
    "tool_tags",
    "validate",
]
