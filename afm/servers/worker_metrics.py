"""Server metrics summed over all uvicorn workers of one server run.

Each worker counts in its own :class:`~afm.servers.common.LatencyMetrics` (no cross-process locking on the request
path) and publishes a snapshot to a small SQLite table (``AFM_METRICS_DB``, default
``~/.cache/afm/server-metrics.sqlite``) at most every ``interval`` seconds while it is busy, and whenever
``/metrics`` is asked. ``/metrics`` then reads the rows of every worker of the same run (``AFM_SERVER_RUN_ID``, set
by the launching process) and sums them. So totals lag by at most ``interval`` seconds for the other workers;
latency percentiles are computed over the union of each worker's most recent ``SAMPLE`` latencies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from afm.servers.common import LatencyMetrics, percentile

log = logging.getLogger(__name__)

RUN_ID_ENV = "AFM_SERVER_RUN_ID"
DB_ENV = "AFM_METRICS_DB"
SAMPLE = 2000
# Rows of runs older than this are deleted when a worker starts.
KEEP_S = 7 * 86400


def default_db() -> Path:
    return Path(os.environ.get(DB_ENV) or Path.home() / ".cache" / "afm" / "server-metrics.sqlite").expanduser()


def new_run_id(service: str) -> str:
    """An id shared by the workers of one launch (set it in ``RUN_ID_ENV`` before starting uvicorn)."""
    return f"{service}-{uuid.uuid4().hex[:12]}"


class WorkerMetrics(LatencyMetrics):
    """Per-worker counters and latencies, published for aggregation across the workers of one run."""

    def __init__(self, service: str, db_path: str | os.PathLike | None = None, run_id: str | None = None,
                 interval: float = 0.5) -> None:
        super().__init__()
        self.service = service
        self.run_id = run_id or os.environ.get(RUN_ID_ENV) or new_run_id(service)
        self.db_path = Path(db_path) if db_path else default_db()
        self.interval = interval
        self._published_version = -1
        self._version = 0
        self._task: asyncio.Task | None = None
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        # The publisher and /metrics use the connection from different threads.
        self._db_lock = threading.Lock()

    def inc(self, name: str, by: int = 1) -> None:
        super().inc(name, by)
        self._version += 1

    def observe(self, seconds: float) -> None:
        super().observe(seconds)
        self._version += 1
        if self._task is None:
            self._start_publisher()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.db_path, timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS worker_metrics (run_id TEXT, pid INTEGER, updated REAL, "
                         "snapshot TEXT, PRIMARY KEY (run_id, pid))")
            conn.execute("DELETE FROM worker_metrics WHERE updated < ?", (time.time() - KEEP_S,))
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _start_publisher(self) -> None:
        try:
            self._task = asyncio.get_running_loop().create_task(self._publish_loop())
        except RuntimeError:  # no running loop (used outside a server): publish on demand only
            self._task = None

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self._version != self._published_version:
                # Off the event loop: serialising the latency sample and the SQLite write take milliseconds.
                await asyncio.to_thread(self.publish_quietly)

    def publish_quietly(self) -> None:
        """:meth:`publish`, ignoring database errors: metrics must never break serving (the next round retries)."""
        try:
            self.publish()
        except sqlite3.Error as exc:
            log.debug("metrics publish failed: %s", exc)

    def publish(self) -> None:
        """Write this worker's snapshot (counters + latency sample) for the other workers to read."""
        version = self._version
        with self._lock:
            counters = dict(self.counters)
            sample = list(self._latencies)[-SAMPLE:]
        snap = {"counters": counters, "latencies": [round(x, 6) for x in sample], "started": self.started}
        with self._db_lock:
            self._db().execute("INSERT OR REPLACE INTO worker_metrics VALUES (?, ?, ?, ?)",
                               (self.run_id, os.getpid(), time.time(), json.dumps(snap)))
        self._published_version = version

    def aggregate(self) -> dict[str, Any]:
        """Counters summed over the run's workers, merged latency percentiles (ms) and this worker's view."""
        own = self.snapshot()
        try:
            self.publish()
            with self._db_lock:
                rows = self._db().execute("SELECT pid, snapshot FROM worker_metrics WHERE run_id = ?",
                                          (self.run_id,)).fetchall()
        except sqlite3.Error as exc:
            return {"workers": 1, "aggregated": False, "aggregation_error": str(exc), **own, "this_worker": own}
        totals: dict[str, int] = {}
        latencies: list[float] = []
        pids = []
        for pid, text in rows:
            snap = json.loads(text)
            pids.append(pid)
            for key, value in snap["counters"].items():
                totals[key] = totals.get(key, 0) + int(value)
            latencies.extend(snap["latencies"])
        latencies.sort()
        out: dict[str, Any] = dict(totals)
        out["latency_ms"] = ({f"p{q}": round(percentile(latencies, q) * 1000, 3) for q in (50, 90, 99)}
                             if latencies else {})
        out["workers"] = len(pids)
        out["worker_pids"] = sorted(pids)
        out["run_id"] = self.run_id
        out["aggregated"] = True
        out["this_worker"] = own
        return out
