"""Versioned system prompts selectable by key, user prompts from files, and chat messages built from them.

A :class:`Prompt` carries its text and the facts the rest of afm needs without reading the text: the tool
tags it enables (hence the generation stop strings), every tag it allows (for
:func:`afm.trajectory.validate`), the observation tag the environment writes, and optionally the order its
functions must follow (``successors``, ``think_before``; checked by :func:`sequence_problems`).
:func:`check_prompt` is the format self-check run on every registration: tags registered, every allowed tag
named in the text, and every example trajectory present in the text and valid under the prompt's own rules.

User prompts come from code (:func:`register_prompt`) or from a file (:func:`load_prompt_file`), YAML::

    key: my_web
    version: "2026-11-22.1"
    tools: [web_search]
    answer_format: "<answer>short answer</answer>"
    text: |
      You answer questions with <think>, <web_search> and <answer>. ...

or markdown whose YAML front matter holds the same fields except ``text``, which is the body after it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from afm.common.names import canonical, close_names
from afm.trajectory import DEFAULT_REGISTRY, Problem, TagKind, TagRegistry, blocks, stop_strings, validate

START = "(start)"
"""The ``successors`` key for the beginning of the trajectory (not a valid tag name, so it cannot collide)."""

STYLES = ("user", "system")
# What a key may contain (a syntax check, not a second matching rule: keys are matched by afm.common.names.canonical):
# no "@", ":" or "/", which get_prompt reads as a version pin, a module attribute or a file.
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TAG_MENTION_RE = re.compile(r"</?([A-Za-z][A-Za-z0-9_\-]*)>")
_FILE_SUFFIXES = (".yaml", ".yml", ".md", ".markdown")
_FILE_FIELDS = ("key", "version", "text", "tools", "answer_format", "description", "tags", "examples",
                "successors", "think_before", "observation_tag")

ExtraRenderer = Callable[[Mapping[str, Any]], str]


def _as_tuple(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"{what} must be a list of strings, not the string {value!r}")
    return tuple(str(v) for v in (value or ()))


@dataclass(frozen=True)
class Prompt:
    """One versioned system prompt.

    Args:
        key: the name it is selected by (``"web_agent"``).
        version: bumped whenever ``text`` changes; by convention ``YYYY-MM-DD.N``.
        text: the prompt itself.
        tools: tool tag names the prompt enables, in the order the stop strings list them.
        answer_format: a one-line note on what goes inside ``<answer>``.
        description: what the prompt is for.
        tags: every tag a trajectory may use (default: ``think``, the tools, the observation tag, ``answer``).
        examples: complete example trajectories quoted verbatim in ``text``; each must validate.
        successors: function -> the functions allowed next (``think`` and observations are transparent);
            :data:`START` keys the first function. Empty = no order rule.
        think_before: functions that must directly follow a ``<think>`` block.
        observation_tag: the tag the environment wraps tool output in.
        registry: the tag registry of the prompt's tags (``None``: :data:`afm.trajectory.DEFAULT_REGISTRY`).
        extra_keys: the keys :func:`build_messages` accepts in ``extra``.
        render_extra: turns ``extra`` (possibly empty) into text appended after the question.
    """

    key: str
    version: str
    text: str
    tools: tuple[str, ...]
    answer_format: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    successors: tuple[tuple[str, tuple[str, ...]], ...] = ()
    think_before: tuple[str, ...] = ()
    observation_tag: str = "observation"
    registry: TagRegistry | None = field(default=None, compare=False, repr=False)
    extra_keys: tuple[str, ...] = ()
    render_extra: ExtraRenderer | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        tools = _as_tuple(self.tools, "tools")
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "examples", _as_tuple(self.examples, "examples"))
        object.__setattr__(self, "think_before", _as_tuple(self.think_before, "think_before"))
        object.__setattr__(self, "extra_keys", _as_tuple(self.extra_keys, "extra_keys"))
        tags = _as_tuple(self.tags, "tags") or ("think", *tools, self.observation_tag, "answer")
        object.__setattr__(self, "tags", tags)
        succ = self.successors.items() if isinstance(self.successors, Mapping) else self.successors
        succ = tuple((str(k), _as_tuple(v, f"successors[{k!r}]")) for k, v in succ)
        object.__setattr__(self, "successors", succ)

    @property
    def tag_registry(self) -> TagRegistry:
        """The registry the prompt's tags are looked up in."""
        return self.registry or DEFAULT_REGISTRY

    @property
    def ref(self) -> str:
        """``key@version``, what a run record should store."""
        return f"{self.key}@{self.version}"

    @property
    def fingerprint(self) -> str:
        """16 hex digits over everything that shapes the model's input and the format rules."""
        payload = [self.text, self.tools, self.tags, self.successors, self.think_before, self.observation_tag,
                   self.answer_format]
        return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:16]


_PROMPTS: dict[str, Prompt] = {}  # keyed by afm.common.names.canonical(prompt.key)
_LOCK = threading.Lock()


def check_prompt(prompt: Prompt) -> list[str]:
    """Everything wrong with ``prompt`` (empty = fine): the self-check :func:`register_prompt` runs.

    Checks the key and version, that every tag is registered with the right kind, that every allowed tag is
    named in the text as ``<tag>`` and no other registered tag is, that the order rules only name allowed
    functions, and that each example appears verbatim in the text and passes :func:`afm.trajectory.validate`
    (restricted to the prompt's tags, answer required, no free text) and :func:`sequence_problems`.
    """
    out: list[str] = []
    reg = prompt.tag_registry
    if not _KEY_RE.match(prompt.key or ""):
        out.append(f"key {prompt.key!r}: use letters, digits, '_', '.' or '-'")
    if not prompt.version or any(c.isspace() or c == "@" for c in prompt.version):
        out.append(f"version {prompt.version!r}: give a non-empty version without spaces or '@'")
    if not prompt.text.strip():
        out.append("text is empty")
    for name in prompt.tags:
        if name not in reg:
            out.append(f"tag {name!r} is not registered (known: {', '.join(reg.names())})")
    for name in prompt.tools:
        if name in reg and reg.get(name).kind != TagKind.TOOL:
            out.append(f"tools: {name!r} is a {reg.get(name).kind.value} tag, not a tool")
        if name not in prompt.tags:
            out.append(f"tool {name!r} is missing from tags")
    if prompt.observation_tag in reg and reg.get(prompt.observation_tag).kind != TagKind.OBSERVATION:
        out.append(f"observation_tag {prompt.observation_tag!r} is not an observation tag")
    if prompt.tools and prompt.observation_tag not in prompt.tags:
        out.append(f"observation tag {prompt.observation_tag!r} is missing from tags")
    if "answer" not in prompt.tags:
        out.append("tags lack 'answer'")
    mentioned = {m for m in _TAG_MENTION_RE.findall(prompt.text) if m in reg}
    out += [f"the text never names <{t}>" for t in prompt.tags if t in reg and t not in mentioned]
    out += [f"the text names <{t}>, which is not among the prompt's tags"
            for t in sorted(mentioned - set(prompt.tags))]
    functions = set(prompt.tags) - {"think", prompt.observation_tag}
    for src, dsts in prompt.successors:
        if src != START and src not in functions:
            out.append(f"successors: {src!r} is not one of the prompt's functions")
        out += [f"successors[{src!r}]: {d!r} is not one of the prompt's functions"
                for d in dsts if d not in functions]
    out += [f"think_before: {t!r} is not one of the prompt's functions"
            for t in prompt.think_before if t not in functions]
    if out:  # examples cannot be checked against broken tags
        return out
    for i, example in enumerate(prompt.examples):
        if example not in prompt.text:
            out.append(f"example {i} does not appear verbatim in the text")
        problems = validate(example, prompt.tags, registry=reg) + sequence_problems(prompt, example)
        out += [f"example {i}: {p}" for p in problems]
    return out


def sequence_problems(prompt: Prompt, text: str) -> list[Problem]:
    """Violations of the prompt's order rules in trajectory ``text`` (empty = follows them).

    ``think`` blocks and observations are transparent: after ``<web_search>`` and its observation, the next
    function must be one of ``successors["web_search"]``. Codes: ``bad_successor``, ``missing_think``.
    """
    grammar = dict(prompt.successors)
    need_think = set(prompt.think_before)
    reg = prompt.tag_registry
    prev, thought = START, False
    out: list[Problem] = []
    for seg in blocks(text, reg):
        if seg.tag == "think":
            thought = True
            continue
        if reg.get(seg.tag).kind == TagKind.OBSERVATION:
            continue
        if seg.tag in need_think and not thought:
            out.append(Problem("missing_think", f"<{seg.tag}> does not follow a <think>", seg.start, seg.tag))
        if grammar and seg.tag not in grammar.get(prev, ()):
            after = "at the start" if prev == START else f"after <{prev}>"
            allowed = ", ".join(f"<{t}>" for t in grammar.get(prev, ())) or "nothing"
            out.append(Problem("bad_successor", f"<{seg.tag}> is not allowed {after} (allowed: {allowed})",
                               seg.start, seg.tag))
        prev, thought = seg.tag, False
    return out


def register_prompt(prompt: Prompt, *, overwrite: bool = False) -> Prompt:
    """Add ``prompt`` under its key after :func:`check_prompt`; returns it.

    Raises ValueError listing the problems, or when the key exists with different content (pass
    ``overwrite=True`` to replace it). Registering an identical prompt again is a no-op.
    """
    problems = check_prompt(prompt)
    if problems:
        raise ValueError(f"prompt {prompt.key!r} is invalid:\n  - " + "\n  - ".join(problems))
    with _LOCK:
        old = _PROMPTS.get(canonical(prompt.key))
        if old is not None and old.key != prompt.key:
            raise ValueError(f"prompt key {prompt.key!r} is the same name as the registered {old.key!r} (names "
                             "match ignoring case and punctuation); pick another key")
        if old is not None and not overwrite:
            if old == prompt:
                return old
            raise ValueError(f"prompt {prompt.key!r} is already registered at version {old.version}; "
                             f"pass overwrite=True to replace it, or pick another key")
        _PROMPTS[canonical(prompt.key)] = prompt
    return prompt


def unregister_prompt(key: str) -> Prompt:
    """Remove and return the prompt called ``key`` (KeyError when unknown)."""
    with _LOCK:
        if canonical(key) not in _PROMPTS:
            raise KeyError(_unknown(key))
        return _PROMPTS.pop(canonical(key))


def list_prompts() -> list[str]:
    """Keys of all registered prompts, sorted."""
    return sorted(p.key for p in _PROMPTS.values())


def _unknown(key: str) -> str:
    close = close_names(key, list_prompts())
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown prompt {key!r}{hint}; known prompts: {', '.join(list_prompts())}"


def get_prompt(key: str) -> Prompt:
    """The prompt selected by ``key``.

    ``key`` is a registered key (in any spelling :func:`afm.common.names.canonical` equates: ``Web-Agent``);
    ``key@version`` (KeyError unless the registered version matches, so a pinned config fails loudly after a text
    change); a path to a YAML/markdown prompt file (loaded, not registered); or ``module:attribute`` naming a
    :class:`Prompt`. An unknown key raises KeyError listing the known keys and the close ones.
    """
    name, _, version = key.partition("@")
    # A module attribute or a path is never a registered key (keys have no ':' or '/').
    prompt = None if ":" in name or "/" in name else _PROMPTS.get(canonical(name))
    if prompt is None:
        if key.lower().endswith(_FILE_SUFFIXES) and Path(key).is_file():
            return load_prompt_file(key)
        if ":" in key and "@" not in key:
            module, _, attr = key.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            if not isinstance(obj, Prompt):
                raise TypeError(f"{key!r} is a {type(obj).__name__}, not a Prompt")
            return obj
        raise KeyError(_unknown(key))
    if version and version != prompt.version:
        raise KeyError(f"prompt {name!r} is at version {prompt.version}, not {version}")
    return prompt


def _resolve(prompt: Prompt | str) -> Prompt:
    return prompt if isinstance(prompt, Prompt) else get_prompt(prompt)


def stop_strings_for(prompt: Prompt | str) -> list[str]:
    """Generation stop strings: the closing tags of the prompt's tools, then ``</answer>``."""
    p = _resolve(prompt)
    return stop_strings(p.tools, registry=p.tag_registry)


def build_messages(
    prompt: Prompt | str, question: str, style: str = "user", extra: Mapping[str, Any] | None = None,
) -> list[dict[str, str]]:
    """Chat messages for one question.

    Args:
        prompt: a :class:`Prompt` or a key for :func:`get_prompt`.
        question: the task; stripped.
        style: ``"user"`` puts the prompt in the user message, ``prompt.text.strip() + "\\n\\nQuestion: " +
            question.strip()``, as AFM's RL data did; ``"system"`` sends the prompt as a system message and
            the question alone as the user message.
        extra: per-question options the prompt understands (``prompt.extra_keys``; e.g. the code agent's
            ``stdin`` / ``starter_code``); its rendering follows the question, after a blank line.

    Returns:
        ``[{"role": "user", ...}]`` or ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """
    p = _resolve(prompt)
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if not question or not question.strip():
        raise ValueError("question is empty")
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(p.extra_keys))
    if unknown:
        accepted = ", ".join(p.extra_keys) or "none"
        raise ValueError(f"prompt {p.key!r} does not understand extra keys {unknown} (accepted: {accepted})")
    suffix = p.render_extra(extra).strip() if p.render_extra is not None else ""
    body = question.strip() + (f"\n\n{suffix}" if suffix else "")
    if style == "user":
        return [{"role": "user", "content": f"{p.text.strip()}\n\nQuestion: {body}"}]
    return [{"role": "system", "content": p.text.strip()}, {"role": "user", "content": body}]


def _from_mapping(data: Mapping[str, Any], source: str) -> Prompt:
    unknown = sorted(set(data) - set(_FILE_FIELDS))
    if unknown:
        raise ValueError(f"{source}: unknown fields {unknown}; allowed: {', '.join(_FILE_FIELDS)}")
    missing = [k for k in ("key", "version", "text") if not data.get(k)]
    if missing:
        raise ValueError(f"{source}: missing required fields {missing}")
    kwargs = dict(data)
    kwargs["version"] = str(kwargs["version"])
    kwargs.setdefault("tools", ())
    try:
        return Prompt(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_prompt_file(path: str | Path, *, register: bool = False, overwrite: bool = False) -> Prompt:
    """Read a prompt from YAML (``.yaml``/``.yml``) or markdown with YAML front matter (``.md``).

    Unknown fields are errors. In markdown the text is the body after the front matter, without its leading
    and trailing blank lines. The prompt is checked with :func:`check_prompt` (ValueError listing the
    problems) and registered when ``register``.
    """
    path = Path(path)
    raw = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".md", ".markdown"):
        m = re.match(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", raw, re.DOTALL)
        if m is None:
            raise ValueError(f"{path}: a markdown prompt starts with YAML front matter between '---' lines")
        meta = yaml.safe_load(m.group(1)) or {}
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: the front matter must be a mapping")
        if "text" in meta:
            raise ValueError(f"{path}: in markdown the text is the body, not a 'text' field")
        meta["text"] = raw[m.end():].strip("\r\n")
    elif path.suffix.lower() in (".yaml", ".yml"):
        meta = yaml.safe_load(raw)
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: expected a mapping with key, version, text, tools, ...")
    else:
        raise ValueError(f"{path}: unsupported prompt file type; use one of {', '.join(_FILE_SUFFIXES)}")
    prompt = _from_mapping(meta, str(path))
    if register:
        return register_prompt(prompt, overwrite=overwrite)
    problems = check_prompt(prompt)
    if problems:
        raise ValueError(f"{path}: prompt {prompt.key!r} is invalid:\n  - " + "\n  - ".join(problems))
    return prompt


class _LiteralDumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_LiteralDumper.add_representer(str, _str_presenter)


def _to_mapping(prompt: Prompt) -> dict[str, Any]:
    if prompt.registry is not None or prompt.render_extra is not None:
        raise ValueError(f"prompt {prompt.key!r} has a custom tag registry or extra renderer, which a file "
                         f"cannot hold")
    defaults = {f.name: f.default for f in fields(Prompt)}
    out: dict[str, Any] = {}
    for name in _FILE_FIELDS:
        value = getattr(prompt, name)
        if name == "successors":
            value = {k: list(v) for k, v in value}
        elif isinstance(value, tuple):
            value = list(value)
        if name in ("key", "version", "text", "tools") or (value and value != defaults.get(name)):
            out[name] = value
    return out


def save_prompt_file(prompt: Prompt, path: str | Path) -> Path:
    """Write ``prompt`` as YAML or markdown (by suffix); :func:`load_prompt_file` reads it back equal."""
    path = Path(path)
    data = _to_mapping(prompt)
    if path.suffix.lower() in (".md", ".markdown"):
        text = data.pop("text")
        if text != text.strip("\r\n"):
            raise ValueError("a markdown prompt cannot keep leading or trailing blank lines; use YAML")
        front = yaml.dump(data, Dumper=_LiteralDumper, sort_keys=False, allow_unicode=True)
        path.write_text(f"---\n{front}---\n\n{text}\n", encoding="utf-8")
    elif path.suffix.lower() in (".yaml", ".yml"):
        path.write_text(yaml.dump(data, Dumper=_LiteralDumper, sort_keys=False, allow_unicode=True),
                        encoding="utf-8")
    else:
        raise ValueError(f"{path}: unsupported prompt file type; use one of {', '.join(_FILE_SUFFIXES)}")
    return path
