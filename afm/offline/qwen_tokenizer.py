"""A Qwen2.5-compatible fast tokenizer built offline from the BPE ranks that the ``dashscope`` wheel ships.

Masking must be checked with the vocabulary our users train with, and Qwen2.5's tokenizer files cannot be
downloaded here. The ``dashscope`` package (PyPI, pinned in the ``dev`` extra) carries
``dashscope/resources/qwen.tiktoken``: Qwen's 151,643 byte-level BPE ranks, whose ids are Qwen2/Qwen2.5's regular
token ids. From them this module writes a ``transformers`` tokenizer folder (``tokenizer.json`` +
``tokenizer_config.json`` with Qwen2.5's chat template) that ``AutoTokenizer`` and LLaMA-Factory load by path:

- vocabulary: each rank's bytes in the GPT-2 byte-to-character alphabet, id = rank;
- merges: one per multi-byte token, the pair that byte-level BPE restricted to lower ranks ends with (the merge
  that created the token), listed in rank order, so priority equals rank as in tiktoken;
- Qwen2's normaliser (NFC) and pre-tokenizer (its split regex, then byte-level without regex);
- Qwen2.5's 22 added tokens at ids 151643-151664 (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` ...).

Test and benchmark helper only: afm itself never needs it. The folder is built once (about 10 s) and reused.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

# Qwen2's pre-tokenizer split, stated once with the tiny model that trains its tokenizer with it
from afm.model.tiny import QWEN2_PATTERN

BUILDER_VERSION = "1"
N_RANKS = 151643
# (content, special) in id order from 151643, as in Qwen2.5's tokenizer_config.json
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
]
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = N_RANKS, N_RANKS + 1, N_RANKS + 2

# Qwen2.5-Instruct's chat template (tools section included), as its tokenizer_config.json renders it.
CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)


def ranks_path() -> Path:
    """Where the installed ``dashscope`` package keeps ``qwen.tiktoken`` (found without importing dashscope)."""
    spec = importlib.util.find_spec("dashscope")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the Qwen tokenizer helper needs the dashscope wheel: pip install dashscope==2.0.2 "
                           "(it is in afm's dev extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: this dashscope release does not ship Qwen's BPE ranks "
                           "(pip install dashscope==2.0.2)")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    """``token bytes -> rank`` from a tiktoken file (``base64 rank`` per line); checks ranks are 0..N-1."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            b64, rank = line.split()
            ranks[base64.b64decode(b64, validate=True)] = int(rank)
        except ValueError as e:
            raise ValueError(f"{path}:{n}: not a tiktoken 'base64 rank' line: {line[:60]!r}") from e
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"{path}: ranks are not the contiguous range 0..{len(ranks) - 1}")
    return ranks


def _last_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The pair whose merge produced ``token``: BPE over its bytes, using only ranks below its own."""
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = limit, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], limit)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {limit}) is not reachable by BPE merges of lower rank")
    return parts[0], parts[1]


def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table (byte-level BPE vocabularies are written in it)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _tokenizer_object(ranks: dict[bytes, int]):
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    alphabet = _byte_alphabet()

    def as_str(b: bytes) -> str:
        return "".join(alphabet[x] for x in b)

    by_rank = sorted(ranks, key=ranks.__getitem__)
    vocab = {as_str(t): r for t, r in ranks.items()}
    merges = [tuple(map(as_str, _last_merge(t, ranks))) for t in by_rank if len(t) > 1]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, byte_fallback=False,
                               fuse_unk=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for content, special in ADDED_TOKENS:  # one at a time, so ids follow the list order whatever the kind
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    return tok


def build_qwen25_tokenizer(out_dir: str | Path, ranks_file: Path | None = None) -> Path:
    """Write (or reuse) a Qwen2.5-compatible tokenizer folder at ``out_dir`` and return its path.

    The folder is reused when its stamp names the same ranks file content and builder version; it is written to a
    temporary sibling and renamed, so an interrupted build never leaves a half folder behind.
    """
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    src = ranks_file or ranks_path()
    data = src.read_bytes()
    stamp = f"{BUILDER_VERSION}-{hashlib.sha256(data).hexdigest()[:16]}"
    stamp_file = out / "afm_qwen_tokenizer.stamp"
    if stamp_file.is_file() and stamp_file.read_text() == stamp:
        return out
    ranks = load_ranks(src)
    if len(ranks) != N_RANKS:
        raise ValueError(f"{src}: {len(ranks)} ranks, expected Qwen's {N_RANKS}")
    tok = _tokenizer_object(ranks)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[c for c, special in ADDED_TOKENS[1:] if special],
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    hf.save_pretrained(tmp)
    cfg_path = tmp / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    # transformers 4.x cannot load the "TokenizersBackend" class name that 5.x writes; Qwen2.5 names its own class.
    cfg.update(tokenizer_class="Qwen2TokenizerFast", add_bos_token=False, add_prefix_space=False,
               bos_token=None, errors="replace", model_max_length=131072, split_special_tokens=False)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    (tmp / "afm_qwen_tokenizer.stamp").write_text(stamp)
    tmp.chmod(0o755)  # mkdtemp makes it private; the folder is a shared cache
    try:
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.replace(out, old / "x")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, out)
    except OSError:
        # another process (a second pytest-xdist worker) built the same folder at the same time: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
        if not (stamp_file.is_file() and stamp_file.read_text() == stamp):
            raise
    return out
