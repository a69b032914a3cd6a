"""The settings shared by the two callers of the judge model (``GRM_*``): the reward judge
(:class:`afm.rewards.judge.JudgeConfig`) and the best-of-N selector (:class:`afm.eval.select.SelectorConfig`).

Each subclass names its own variables (``env_prefix``: ``AFM_JUDGE_`` / ``AFM_SELECTOR_``), its cache file and its
defaults; the endpoint, the checks, :meth:`ModelCallConfig.from_env`, the cache switch and the counters are written
once here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from afm.common.chat_client import ChatEndpoint
from afm.common.kvcache import KVCache, open_cache

DEFAULT_MODEL = "gpt-4.1-mini"
# Cache locations that mean "no cache".
CACHE_OFF = ("", "off", "none", "0", "false", "disabled")


def default_endpoint() -> ChatEndpoint:
    """The judge model's endpoint before the environment is read: no URL (not configured), 60 s, 4 retries."""
    return ChatEndpoint(model=DEFAULT_MODEL, timeout_s=60.0, retries=4)


@dataclass(frozen=True)
class ModelCallConfig:
    """Where the judge model is (``endpoint``) and how one caller uses it; subclasses set the class variables
    and their own defaults (and are decorated with :func:`afm.common.chat_client.holds_endpoint`)."""

    env_prefix: ClassVar[str] = ""  # AFM_<caller>_: <prefix>TIMEOUT, <prefix>CACHE and env_ints read from it
    env_ints: ClassVar[tuple[str, ...]] = ("concurrency",)  # integer fields read from <prefix><FIELD>
    cache_namespace: ClassVar[str] = ""

    endpoint: ChatEndpoint = field(default_factory=default_endpoint)  # no base_url = not configured
    concurrency: int = 1  # requests in flight at once
    temperature: float = 0.0
    max_tokens: int = 1024
    cache: str = "off"  # path, redis:// URL, or "off"
    cache_ttl: float | None = None  # seconds; None keeps entries forever

    def checks(self) -> dict[str, bool]:
        """Field name -> whether its value is valid (subclasses add theirs)."""
        return {"concurrency": self.concurrency >= 1, "max_tokens": self.max_tokens >= 1}

    def __post_init__(self) -> None:
        bad = [name for name, ok in self.checks().items() if not ok]
        if bad:
            raise ValueError(f"invalid {type(self).__name__} values: "
                             f"{', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")

    @property
    def configured(self) -> bool:
        """True when a model endpoint is set."""
        return self.endpoint.configured

    def open_cache(self) -> KVCache | None:
        """The cache ``cache`` names, or None when it is switched off."""
        if self.cache.strip().lower() in CACHE_OFF:
            return None
        return open_cache(self.cache, namespace=self.cache_namespace, ttl=self.cache_ttl)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Any:
        """Config from the environment, then ``overrides`` (field names, endpoint fields included) on top.

        Reads ``GRM_BASE_URL``, ``GRM_API_KEY``, ``GRM_MODEL_NAME``, ``<prefix>TIMEOUT``, ``<prefix>CACHE`` and
        ``<prefix><FIELD>`` for each of ``env_ints``.
        """
        env = os.environ if env is None else env
        names: dict[str, str | None] = {"model": "GRM_MODEL_NAME", "timeout_s": cls.env_prefix + "TIMEOUT",
                                        "retries": None}
        endpoint = ChatEndpoint.from_env("GRM_", env, names=names, **asdict(default_endpoint()))
        values: dict[str, Any] = {"endpoint": endpoint}
        for name in cls.env_ints:
            var = cls.env_prefix + name.upper()
            if env.get(var):
                values[name] = int(env[var])
        if cls.env_prefix + "CACHE" in env:
            values["cache"] = env[cls.env_prefix + "CACHE"]
        values.update(overrides)
        return cls(**values)


class LazyCache:
    """The cache a config names, opened on first use (in the thread or process that uses it)."""

    def __init__(self, config: ModelCallConfig) -> None:
        self.config = config
        self._cache: KVCache | None = None
        self._opened = False

    def get(self) -> KVCache | None:
        """The open cache, or None when the config switches it off."""
        if not self._opened:
            self._opened = True
            self._cache = self.config.open_cache()
        return self._cache

    def close(self) -> None:
        """Close it if it was opened; the next :meth:`get` opens it again."""
        if self._cache is not None:
            self._cache.close()
        self.forget()

    def forget(self) -> None:
        """Drop it without closing (a forked child: the connection is the parent's)."""
        self._cache, self._opened = None, False


@dataclass
class CallStats:
    """Counters of one judge or selector."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    failures: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
