"""Run a function right after a module has been imported (a post-import hook), whoever imports it first.

The verl plugin must register the ``hf`` rollout and patch two verl functions, but it is loaded while ``import
verl`` is still running, before those verl modules exist; importing them there would pull Ray, transformers and
FSDP into every process that imports verl, and risk import cycles. A finder on ``sys.meta_path`` wraps the loader
of each watched module so that the callback runs once the module body has executed, in whichever process and
order verl imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType

logger = logging.getLogger(__name__)

_CALLBACKS: dict[str, list[Callable[[ModuleType], None]]] = {}
_LOCK = threading.RLock()


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _run(self.name, module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path, target=None):  # type: ignore[override]
        if fullname not in _CALLBACKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()


def _run(name: str, module: ModuleType) -> None:
    with _LOCK:
        callbacks = _CALLBACKS.pop(name, [])
    for fn in callbacks:
        fn(module)


def when_imported(name: str, fn: Callable[[ModuleType], None]) -> None:
    """Call ``fn(module)`` once ``name`` is imported; at once if it already is.

    Errors raised by ``fn`` propagate into the import that triggered it: a patch that no longer fits verl must fail
    loudly, not leave verl half-patched.
    """
    if name in sys.modules and getattr(sys.modules[name], "__spec__", None) is not None \
            and not getattr(sys.modules[name].__spec__, "_initializing", False):
        fn(sys.modules[name])
        return
    with _LOCK:
        _CALLBACKS.setdefault(name, []).append(fn)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
