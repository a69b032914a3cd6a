"""Persistent key-value caches shared by processes: SQLite (WAL, default) or Redis (several nodes).

Used by the search and crawl servers and by the LLM judge. Values are strings (callers store JSON). Keys are
hashed with the namespace so any text can be a key. Entries carry an expiry time; ``ttl=None`` keeps them forever.

``open_cache("path/to/cache.sqlite")`` or ``open_cache("redis://host:6379/0")``. SQLite in WAL mode lets several
uvicorn workers (processes) read and write one file concurrently; a write that finds the database busy waits
(``busy_timeout``) instead of failing, and a failed write never corrupts earlier entries (each is one transaction).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path


def cache_location(env_var: str, filename: str) -> str:
    """``$env_var`` when set (a path, a ``redis://`` URL or ``off``), else ``$XDG_CACHE_HOME/afm/<filename>``
    (``~/.cache/afm/<filename>`` by default)."""
    env = os.environ.get(env_var)
    if env is not None:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "afm" / filename)


def cache_key(*parts: object) -> str:
    """A stable key from several parts (joined unambiguously, then SHA-256)."""
    h = hashlib.sha256()
    for part in parts:
        data = str(part).encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class KVCache(ABC):
    """String cache with per-entry TTL; ``namespace`` separates users of one store."""

    def __init__(self, namespace: str, ttl: float | None) -> None:
        self.namespace = namespace
        self.ttl = ttl

    def _k(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    @abstractmethod
    def get(self, key: str) -> str | None:
        """The value, or ``None`` when missing or expired."""

    @abstractmethod
    def set(self, key: str, value: str, ttl: float | None = ...) -> None:  # type: ignore[assignment]
        """Store ``value``; ``ttl`` overrides the cache's default (``None`` = never expires)."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    def close(self) -> None:
        return None

    @property
    def url(self) -> str:
        return ""


class SQLiteCache(KVCache):
    """A table ``kv(key, value, expires)`` in one SQLite file in WAL mode; one connection per thread."""

    def __init__(self, path: str | os.PathLike, namespace: str = "default", ttl: float | None = None,
                 busy_timeout_ms: int = 30_000) -> None:
        super().__init__(namespace, ttl)
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        conn = self._conn()
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL)")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            # A connection must not cross fork(): uvicorn workers each open their own.
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value, expires FROM kv WHERE key = ?", (self._k(key),)).fetchone()
        if row is None:
            return None
        value, expires = row
        if expires is not None and expires < time.time():
            return None
        return value

    def set(self, key: str, value: str, ttl: float | None = ...) -> None:  # type: ignore[assignment]
        ttl = self.ttl if ttl is ... else ttl
        expires = None if ttl is None else time.time() + float(ttl)
        self._conn().execute("INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
                             (self._k(key), value, expires))

    def delete(self, key: str) -> None:
        self._conn().execute("DELETE FROM kv WHERE key = ?", (self._k(key),))

    def purge_expired(self) -> int:
        """Delete expired entries of every namespace; returns how many."""
        cur = self._conn().execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires < ?", (time.time(),))
        return cur.rowcount

    def __len__(self) -> int:
        row = self._conn().execute("SELECT COUNT(*) FROM kv WHERE key LIKE ? AND (expires IS NULL OR expires >= ?)",
                                   (self.namespace.replace("%", r"\%") + ":%", time.time())).fetchone()
        return int(row[0])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @property
    def url(self) -> str:
        return f"sqlite://{self.path}"


class RedisCache(KVCache):
    """Redis backend (``redis://``/``rediss://`` URL) for caches shared by several nodes."""

    def __init__(self, url: str, namespace: str = "default", ttl: float | None = None) -> None:
        super().__init__(namespace, ttl)
        import redis  # servers extra

        self._url = url
        self._client = redis.Redis.from_url(url, decode_responses=True)
        self._client.ping()

    def get(self, key: str) -> str | None:
        return self._client.get(self._k(key))

    def set(self, key: str, value: str, ttl: float | None = ...) -> None:  # type: ignore[assignment]
        ttl = self.ttl if ttl is ... else ttl
        self._client.set(self._k(key), value, px=None if ttl is None else max(1, int(float(ttl) * 1000)))

    def delete(self, key: str) -> None:
        self._client.delete(self._k(key))

    def __len__(self) -> int:
        return sum(1 for _ in self._client.scan_iter(match=self._k("*"), count=1000))

    def close(self) -> None:
        self._client.close()

    @property
    def url(self) -> str:
        # Never expose a password that may be embedded in the URL.
        return self._url.split("@")[-1] if "@" in self._url else self._url


def open_cache(location: str | os.PathLike, namespace: str = "default", ttl: float | None = None) -> KVCache:
    """Open a cache from a path (SQLite) or a ``redis://`` URL."""
    loc = str(location)
    if loc.startswith(("redis://", "rediss://", "unix://")):
        return RedisCache(loc, namespace, ttl)
    if loc.startswith("sqlite://"):
        loc = loc[len("sqlite://"):]
    return SQLiteCache(loc, namespace, ttl)
