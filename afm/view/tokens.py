"""What each token id spells, for the page's token view: the bytes of every id a source uses, from its tokenizer.

Byte-level BPE tokens (Qwen, GPT-2 style) may hold part of a UTF-8 character, so a token's own decode can be
``U+FFFD``; for those the page gets the token's raw bytes and decodes a segment's tokens as one byte stream, which
gives every character to the token that completes it. SentencePiece byte-fallback pieces (``<0x0A>``) are bytes too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """Character -> byte of byte-level BPE vocabularies: printable Latin-1 bytes stand for themselves, every other
    byte for the character 256 + its rank among those others."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    keep = set(printable)
    out = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in keep:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def piece_of(tok: Any, token_id: int) -> str | list[int]:
    """The text of one id, or its bytes (a list) when the text alone is not whole UTF-8."""
    text = tok.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "\ufffd" not in text:
        return text
    piece = tok.convert_ids_to_tokens(token_id) or ""
    alphabet = byte_level_alphabet()
    if piece and all(c in alphabet for c in piece):
        return [alphabet[c] for c in piece]
    if m := _BYTE_PIECE.fullmatch(piece):
        return [int(m.group(1), 16)]
    return text


def vocabulary(tokenizer_path: str, ids: Iterable[int]) -> dict[str, list[Any]]:
    """``{"ids": [...], "pieces": [...]}`` for the given ids (sorted) with ``tokenizer_path``'s tokenizer.

    Raises ImportError without transformers and OSError when the tokenizer cannot be loaded.
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    wanted = sorted(set(ids))
    return {"ids": wanted, "pieces": [piece_of(tok, i) for i in wanted]}
