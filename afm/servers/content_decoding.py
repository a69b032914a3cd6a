"""HTTP content decoding whose output never outruns its consumer, for any stack of ``Content-Encoding`` layers.

httpx decodes each network chunk in one call, so with ``Content-Encoding: gzip, gzip`` a 1 KB body inflates to
~512 KB in the outer layer and to 512 MiB in the inner one before any size check sees a byte. Here every layer is a
zlib stream asked for at most ``step`` bytes per call, and a layer is only asked for more when the layer after it
has taken what it gave; the caller pulls decoded pieces one at a time and stops pulling at its cap, so memory stays
near ``layers * step`` plus what the caller keeps, whatever the compression ratio.

Supported: ``gzip`` (``x-gzip``; concatenated members), ``deflate`` (zlib-wrapped or raw, as browsers accept) and
``identity``, stacked up to :data:`MAX_LAYERS` deep. Other encodings (``br``, ``zstd``, ``compress``) raise
:class:`UnsupportedEncoding`: the fetcher never asks for them (see :data:`ACCEPT_ENCODING`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

ACCEPT_ENCODING = "gzip, deflate"
MAX_LAYERS = 4
STEP = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class ContentDecodingError(ValueError):
    """A body that cannot be decoded; ``str(exc)`` says why, for the page's error."""


class UnsupportedEncoding(ContentDecodingError):
    """A ``Content-Encoding`` this module does not decode (never asked for by the fetcher)."""


def parse_encodings(header: str) -> list[str]:
    """The codings of a ``Content-Encoding`` header in the order they were applied, ``identity`` left out."""
    codings = [c.strip().lower() for c in header.split(",")]
    return [c for c in codings if c and c != "identity"]


class _ZlibLayer:
    """One gzip or deflate layer that yields at most ``step`` bytes per piece."""

    def __init__(self, coding: str, step: int) -> None:
        self.coding = coding
        self.step = step
        self._raw_deflate = False
        self._started = False
        self._done = False
        self._d = self._new()

    def _new(self) -> zlib._Decompress:
        if self.coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if self._raw_deflate else zlib.MAX_WBITS)

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """Decoded pieces of ``data`` (state carries over between calls); each at most ``step`` bytes."""
        while data and not self._done:
            first = not self._started
            self._started = True
            try:
                out = self._d.decompress(data, self.step)
            except zlib.error as exc:
                if first and self.coding == "deflate" and not self._raw_deflate:
                    # Some servers send raw deflate (no zlib header) under "deflate"; browsers accept both.
                    self._raw_deflate = True
                    self._d = self._new()
                    self._started = False
                    continue
                raise ContentDecodingError(f"the {self.coding} body is corrupt ({exc})") from None
            data = self._d.unconsumed_tail
            if self._d.eof:
                data = self._d.unused_data
                if self.coding == "gzip" and data.startswith(_GZIP_MAGIC):
                    self._d = self._new()  # the next member of a multi-member gzip body
                else:
                    self._done = True  # whatever follows the end of the stream is ignored, as browsers do
            if out:
                yield out
            if not data:
                # A full piece may leave output inside zlib with no input left: ask again until it runs dry.
                while len(out) == self.step and not self._d.eof:
                    try:
                        out = self._d.decompress(b"", self.step)
                    except zlib.error as exc:
                        raise ContentDecodingError(f"the {self.coding} body is corrupt ({exc})") from None
                    if out:
                        yield out


class ContentDecoder:
    """Decodes a body under its ``Content-Encoding`` header, piece by piece, each piece at most ``step`` bytes."""

    def __init__(self, header: str, *, step: int = STEP) -> None:
        codings = parse_encodings(header)
        unsupported = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
        if unsupported:
            raise UnsupportedEncoding(f"unsupported content encoding {unsupported[0]!r} (afm asks for "
                                      f"{ACCEPT_ENCODING} only)")
        if len(codings) > MAX_LAYERS:
            raise ContentDecodingError(f"{len(codings)} stacked content encodings ({header.strip()[:100]!r}); "
                                       f"at most {MAX_LAYERS} are decoded")
        # The last coding listed was applied last, so it comes off first.
        self.layers = [_ZlibLayer("gzip" if c == "x-gzip" else c, step) for c in reversed(codings)]

    def decode(self, data: bytes) -> Iterator[bytes]:
        """Decoded pieces of the next raw chunk; the caller may stop iterating at any time (at its cap)."""
        return self._through(0, data)

    def _through(self, depth: int, data: bytes) -> Iterator[bytes]:
        if depth == len(self.layers):
            if data:
                yield data
            return
        for piece in self.layers[depth].pieces(data):
            yield from self._through(depth + 1, piece)
