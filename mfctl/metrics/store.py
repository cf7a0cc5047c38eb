"""Per-run metrics in SQLite: ``runs/<run-id>/metrics.db``.

Tables (units in column names): ``run`` (one row), ``iterations``, ``reconfigurations``,
``health``, ``events``, ``timings`` (the job's measured all-to-all and GEMM times, for ``mfctl
profile --run``). Documented in ``docs/metrics.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mfctl.runtime.summary import RunSummary

log = logging.getLogger(__name__)
#: ``timings`` samples taken from one ``iteration`` message (a host's ranks × tasks × Timings'
#: max_samples: 8 ranks × 2 × 64 = 1024 is a full one) and kept per run (~70 B a row: ≤ 15 MB)
MAX_TIMINGS_PER_MESSAGE = 4096
MAX_TIMINGS_ROWS = 200_000
#: warnings logged per host about dropped timings (then one saying that the rest are not)
TIMINGS_WARNINGS_PER_HOST = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
  run_id TEXT PRIMARY KEY, playbook TEXT, inventory TEXT, started_unix REAL, ended_unix REAL,
  status TEXT, exit_code INTEGER, time_scale REAL, summary_json TEXT);
CREATE TABLE IF NOT EXISTS iterations (
  iteration INTEGER, host TEXT, seconds REAL, tokens INTEGER, epoch INTEGER, paused INTEGER,
  a2a_s REAL, compute_s REAL, inter_bytes REAL, ocs_bytes REAL, wall_unix REAL,
  PRIMARY KEY (iteration, host));
CREATE TABLE IF NOT EXISTS reconfigurations (
  epoch INTEGER PRIMARY KEY, region TEXT, iteration INTEGER, reason TEXT, circuits_json TEXT,
  xc_added INTEGER, xc_removed INTEGER, t_plan_ms REAL, t_drain_ms REAL, t_switch_ms REAL,
  t_verify_ms REAL, t_linkup_ms REAL, t_resume_ms REAL, t_runtime_ms REAL,
  predicted_gain_s REAL, predicted_cost_s REAL, objective_before_s REAL, objective_after_s REAL,
  lanes_failed INTEGER, outcome TEXT, error TEXT, wall_unix REAL);
CREATE TABLE IF NOT EXISTS predictions (
  iteration INTEGER, region TEXT, predictor TEXT, rel_error REAL, wall_unix REAL);
CREATE TABLE IF NOT EXISTS health (
  host TEXT, status TEXT, findings_json TEXT, wall_unix REAL);
CREATE TABLE IF NOT EXISTS events (
  wall_unix REAL, kind TEXT, message TEXT);
CREATE TABLE IF NOT EXISTS timings (
  iteration INTEGER, host TEXT, task TEXT, n REAL, unit TEXT, seconds REAL, wall_unix REAL);
"""


def read_only(path: str | Path) -> sqlite3.Connection:
    """A run's ``metrics.db`` opened for reading without changing it. A run killed with -9 in the
    middle of a write leaves a hot rollback journal, which a read-only connection cannot roll back
    ("attempt to write a readonly database"): then the database and its journal are copied aside,
    rolled back there, and read from memory — the run's files stay as the run left them.
    Raises sqlite3.Error when it is not a database."""
    import shutil
    import tempfile

    path = Path(path)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
        if not Path(f"{path}-journal").exists() and not Path(f"{path}-wal").exists():
            raise
    with tempfile.TemporaryDirectory(prefix="mfctl-metrics-") as tmp:
        for suffix in ("", "-journal", "-wal"):
            if Path(f"{path}{suffix}").exists():
                shutil.copyfile(f"{path}{suffix}", f"{tmp}/metrics.db{suffix}")
        copy = sqlite3.connect(f"{tmp}/metrics.db")
        mem = sqlite3.connect(":memory:")
        try:
            copy.backup(mem)
        finally:
            copy.close()
    return mem


class MetricsStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), check_same_thread=False)
        self.db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._tls = threading.local()  # .batching: this thread's writes are committed by batch()'s end
        self._timing_rows: int | None = None  # rows in ``timings`` (counted at the first message)
        self._timing_warnings: dict[str, int] = {}

    def _x(self, sql: str, args=()) -> None:
        with self._lock:
            self.db.execute(sql, args)
            if not getattr(self._tls, "batching", False):
                self.db.commit()

    @contextlib.contextmanager
    def batch(self):
        """This thread's writes inside the block are committed once, at its end (one fsync for many
        rows: a committed insert costs ~1 ms of CPU and several ms on a busy disk). Another thread's
        write meanwhile commits them with its own, which is harmless: a row is never lost or torn."""
        self._tls.batching = True
        try:
            yield self
        finally:
            self._tls.batching = False
            with self._lock:
                self.db.commit()

    def start_run(self, run_id: str, playbook: str, inventory: str, time_scale: float) -> None:
        self._x("INSERT INTO run (run_id, playbook, inventory, started_unix, status, time_scale) VALUES (?,?,?,?,?,?)",
                (run_id, playbook, inventory, time.time(), "running", time_scale))

    def end_run(self, run_id: str, status: str, exit_code: int, summary: "RunSummary") -> None:
        """The run's end; ``summary_json`` is :meth:`RunSummary.to_dict` (summary.json's object)."""
        self._x("UPDATE run SET ended_unix=?, status=?, exit_code=?, summary_json=? WHERE run_id=?",
                (time.time(), status, exit_code, json.dumps(summary.to_dict()), run_id))

    def iteration(self, host: str, m: dict) -> None:
        self._x("INSERT OR REPLACE INTO iterations VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (m["iteration"], host, m.get("seconds"), m.get("tokens"), m.get("epoch"), int(bool(m.get("paused"))),
                 m.get("a2a_s"), m.get("compute_s"), m.get("inter_bytes"), m.get("ocs_bytes"), time.time()))

    def timings(self, host: str, iteration, entries) -> int:
        """Store an ``iteration`` message's ``timings`` (:func:`mfctl.fabric.profile.clean_timings`:
        the valid ones of the first :data:`MAX_TIMINGS_PER_MESSAGE`, while the run holds fewer than
        :data:`MAX_TIMINGS_ROWS`); return how many were stored. What is dropped is logged as a
        warning (:data:`TIMINGS_WARNINGS_PER_HOST` per host); nothing a runtime sends raises."""
        from mfctl.fabric.profile import clean_timings

        rows, dropped = clean_timings(entries, MAX_TIMINGS_PER_MESSAGE)
        if not isinstance(iteration, int) or isinstance(iteration, bool) or not 0 <= iteration < 2**63:
            if rows:
                dropped["the message's iteration is not a count"] = len(rows)
            rows = []
        with self._lock:
            if self._timing_rows is None:
                self._timing_rows = self.db.execute("SELECT count(*) FROM timings").fetchone()[0]
            room = max(0, MAX_TIMINGS_ROWS - self._timing_rows)
            if len(rows) > room:
                dropped[f"the run holds {MAX_TIMINGS_ROWS} already"] = len(rows) - room
                rows = rows[:room]
            if rows:
                now = time.time()
                self.db.executemany("INSERT INTO timings VALUES (?,?,?,?,?,?,?)",
                                    [(iteration, host, task, n, unit, s, now) for task, n, unit, s in rows])
                self.db.commit()
                self._timing_rows += len(rows)
            if dropped:
                said = self._timing_warnings.get(host, 0)
                self._timing_warnings[host] = said + 1
                if said < TIMINGS_WARNINGS_PER_HOST:
                    log.warning("%s: iteration timings dropped: %s%s", host,
                                ", ".join(f"{k} {why}" for why, k in sorted(dropped.items())),
                                "; further drops from this host are not logged" if said + 1 == TIMINGS_WARNINGS_PER_HOST
                                else "")
        return len(rows)

    def reconfiguration(self, r: dict) -> None:
        cols = ["epoch", "region", "iteration", "reason", "circuits_json", "xc_added", "xc_removed", "t_plan_ms",
                "t_drain_ms", "t_switch_ms", "t_verify_ms", "t_linkup_ms", "t_resume_ms", "t_runtime_ms",
                "predicted_gain_s", "predicted_cost_s", "objective_before_s", "objective_after_s", "lanes_failed",
                "outcome", "error"]
        vals = [r.get(c) if c != "circuits_json" else json.dumps(r.get("circuits")) for c in cols]
        marks = ",".join("?" * (len(cols) + 1))
        self._x(f"INSERT OR REPLACE INTO reconfigurations ({','.join(cols)}, wall_unix) VALUES ({marks})",
                (*vals, time.time()))

    def prediction(self, iteration: int, region: str, predictor: str, rel_error: float) -> None:
        self._x("INSERT INTO predictions VALUES (?,?,?,?,?)", (iteration, region, predictor, rel_error, time.time()))

    def health(self, host: str, status: str, findings: list) -> None:
        self._x("INSERT INTO health VALUES (?,?,?,?)", (host, status, json.dumps(findings), time.time()))

    def event(self, kind: str, message: str) -> None:
        self._x("INSERT INTO events VALUES (?,?,?)", (time.time(), kind, message))

    def query(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            return self.db.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self.db.close()


def index_run(runs_dir: Path, summary: "RunSummary") -> None:
    """Record a finished run in ``runs/index.sqlite`` (one row per run)."""
    db = sqlite3.connect(str(Path(runs_dir) / "index.sqlite"))
    try:
        db.execute("CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, playbook TEXT, inventory TEXT, status TEXT, "
                   "iterations INTEGER, tokens_per_s REAL, reconfigurations INTEGER, run_dir TEXT, ended_unix REAL)")
        db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                   (summary.run_id, summary.playbook, summary.inventory, summary.status, summary.iterations,
                    summary.tokens_per_s, len(summary.reconfigurations), summary.run_dir, time.time()))
        db.commit()
    finally:
        db.close()
