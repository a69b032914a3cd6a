"""How the page carries its data: gzip-compressed blocks, base64-encoded in inert ``<script>`` elements.

A browser decompresses them itself (``DecompressionStream("gzip")``), so the page needs no library and makes no
request. ``application/octet-stream`` script elements are never executed, and base64 has no ``<`` or ``&``: no
data can end its element early or be read as markup.

- the **manifest** (``afm-m``): the sources, their overviews, the table's rows as columns, where each detail is;
- **text chunks** (``afm-t<N>``): a JSON list of trajectory details (texts, CoA parts, masks, tool calls, reward);
- **token chunks** (``afm-k<N>``): the same trajectories' token ids and log-probabilities, binary (below);
- **vocabularies** (``afm-v<N>``): what each token id spells, read only by the token view.

The page decodes the manifest when it opens and a chunk when a trajectory of it is shown (or searched), so a run
of 10,000 long trajectories opens as fast as its table.

Token chunk layout (little-endian): ``u32 count``, ``count`` x ``u32`` offsets of each trajectory's record from
the end of the table; a record is ``i32 n``, ``n`` x ``i32`` ids, ``i32 m`` (0 or n), ``m`` x ``i16``
log-probabilities in thousandths (``-32768``: none for this token, e.g. observation tokens).
"""

from __future__ import annotations

import base64
import gzip
import json
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import IO, Any

# A chunk is closed at this many trajectories or this much uncompressed text, whichever comes first: small enough
# to decompress in a few milliseconds when one trajectory is opened, large enough to compress well.
CHUNK_ITEMS = 256
CHUNK_BYTES = 1 << 20
NO_LOGPROB = -32768
LOGPROB_SCALE = 1000


def to_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; lone surrogates (possible in records read from JSON) pass as they are, and the page's
    decoder shows them as U+FFFD instead of the writer failing."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                      default=str).encode("utf-8", "surrogatepass")


def encode_block(raw: bytes) -> bytes:
    """gzip (fixed mtime: the same data gives the same page) then base64."""
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0))


def block_element(element_id: str, raw: bytes) -> bytes:
    """An inert script element holding ``raw`` compressed and encoded (``data-n``: the uncompressed size)."""
    return (f'<script type="application/octet-stream" id="{element_id}" data-n="{len(raw)}">'.encode()
            + encode_block(raw) + b"</script>\n")


def _le(arr: array) -> bytes:
    if sys.byteorder != "little":
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def token_record(ids: Sequence[int] | None, logprobs: Sequence[float | None] | None) -> bytes:
    """One trajectory's ids and quantised log-probabilities (empty record when there are no ids)."""
    ids = ids or []
    out = [struct.pack("<i", len(ids)), _le(array("i", ids))]
    if logprobs is not None and len(logprobs) == len(ids):
        q = array("h", [NO_LOGPROB if lp is None else max(-32767, min(32767, round(lp * LOGPROB_SCALE)))
                        for lp in logprobs])
        out += [struct.pack("<i", len(q)), _le(q)]
    else:
        out.append(struct.pack("<i", 0))
    return b"".join(out)


class ChunkWriter:
    """Collects trajectory details and token records, and writes them as chunk elements to ``out`` as they fill.

    :meth:`add` returns the detail's global index; :attr:`chunks` lists ``[first index, count]`` per chunk (chunk
    ``i`` is elements ``afm-t<i>`` and ``afm-k<i>``).
    """

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.chunks: list[list[int]] = []
        self.count = 0
        self.bytes_written = 0
        self._texts: list[bytes] = []
        self._tokens: list[bytes] = []
        self._size = 0

    def add(self, detail: dict[str, Any], ids: Sequence[int] | None, logprobs: Sequence[float | None] | None) -> int:
        text = to_json(detail)
        self._texts.append(text)
        self._tokens.append(token_record(ids, logprobs))
        self._size += len(text) + len(self._tokens[-1])
        index = self.count
        self.count += 1
        if len(self._texts) >= CHUNK_ITEMS or self._size >= CHUNK_BYTES:
            self.flush()
        return index

    def flush(self) -> None:
        if not self._texts:
            return
        n = len(self.chunks)
        first = self.count - len(self._texts)
        texts = b"[" + b",".join(self._texts) + b"]"
        offsets, pos = [], 0
        for rec in self._tokens:
            offsets.append(pos)
            pos += len(rec)
        tokens = struct.pack("<I", len(offsets)) + _le(array("I", offsets)) + b"".join(self._tokens)
        for element in (block_element(f"afm-t{n}", texts), block_element(f"afm-k{n}", tokens)):
            self.out.write(element)
            self.bytes_written += len(element)
        self.chunks.append([first, len(self._texts)])
        self._texts, self._tokens, self._size = [], [], 0


# -- the table as columns ------------------------------------------------------------------------------------------
# Row fields and how they travel: "n" numbers (or null), "s" strings, "c" categories (codes into a value list).
FIELDS: dict[str, str] = {
    "src": "n", "bench": "c", "qid": "s", "k": "n", "q": "s", "gold": "s", "pred": "s", "acc": "n", "score": "n",
    "st": "c", "fail": "c", "fin": "c", "meth": "c", "turns": "n", "calls": "n", "tok": "n", "wall": "n",
    "ts": "n", "idsrc": "c", "lvl": "c", "step": "n", "grp": "n", "adv": "n", "d": "n",
}
_ROUND = {"wall": 3, "adv": 4, "acc": 4, "score": 4}


def _num(value: Any, digits: int | None) -> float | int | None:
    if value is None or isinstance(value, str):
        return None
    x = float(value)
    if x != x or abs(x) == float("inf"):
        return None
    if digits is None:
        return int(x) if x.is_integer() else x
    x = round(x, digits)
    return int(x) if x.is_integer() else x


def columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"n": rows, "cols": {field: values or codes}, "cats": {field: values}}`` of the table's rows."""
    cols: dict[str, list[Any]] = {}
    cats: dict[str, list[str]] = {}
    for name, kind in FIELDS.items():
        values = [r.get(name) for r in rows]
        if kind == "n":
            cols[name] = [_num(v, _ROUND.get(name)) for v in values]
        elif kind == "s":
            cols[name] = ["" if v is None else str(v) for v in values]
        else:
            table: dict[str, int] = {}
            codes = []
            for v in values:
                key = "" if v is None else str(v)
                codes.append(table.setdefault(key, len(table)))
            cols[name] = codes
            cats[name] = list(table)
    return {"n": len(rows), "cols": cols, "cats": cats}
