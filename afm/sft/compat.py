"""The LLaMA-Factory releases the overlay supports, and the upstream symbols it touches."""

from __future__ import annotations

from packaging.version import Version

SUPPORTED = ">=0.9.2,<0.10"
_MIN, _MAX = Version("0.9.2"), Version("0.10")


def check_llamafactory_version(version: str) -> str | None:
    """Return a message when ``version`` is outside the supported range, else None."""
    v = Version(version)
    if v < _MIN or v >= _MAX:
        return (
            f"llamafactory {version} is not supported by afm.sft (needs {SUPPORTED}): "
            "0.9.0/0.9.1 use a different processor layout. pip install 'llamafactory>=0.9.2,<0.10'"
        )
    return None
