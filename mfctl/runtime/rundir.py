"""A run's directory (``runs/<run-id>/``) as the runs commands read it, whether or not the run
wrote its ``summary.json``.

A run that is killed with -9 or runs out of memory leaves ``metrics.db``, ``journal.jsonl`` and
``mfctl.log`` but no summary: :func:`load_summary` then recovers what is known (the run row and
the leader's iterations from ``metrics.db``, the reconfigurations done) with status ``running``
(its ``mfctl run`` is still alive: :data:`PID_FILE`), ``crashed`` (it is gone) or ``unknown``
(not even the run row was written). ``runs list|show|report`` and ``metrics export|serve`` all
read runs through here, so they agree on what a run is.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

from mfctl.errors import MfctlError
from mfctl.procs import start_ticks
from mfctl.runtime.summary import RunSummary

log = logging.getLogger(__name__)

PID_FILE = "mfctl.pid"  #: ``PID START-TIME`` of the ``mfctl run`` writing the directory, removed at its end
MARKERS = ("summary.json", "metrics.db", "journal.jsonl")  #: files that make a directory a run's


def write_pid(run_dir: Path) -> None:
    """Record this process as the run's writer (``PID START-TIME``, the start time from /proc)."""
    (run_dir / PID_FILE).write_text(f"{os.getpid()} {start_ticks(os.getpid()) or ''}\n")


def remove_pid(run_dir: Path) -> None:
    (run_dir / PID_FILE).unlink(missing_ok=True)


def writer_alive(run_dir: Path) -> bool:
    """The process named in the run's :data:`PID_FILE` is still running (same pid, same start time)."""
    try:
        pid, _, start = (run_dir / PID_FILE).read_text().strip().partition(" ")
        return start != "" and start_ticks(int(pid)) == int(start)
    except (OSError, ValueError):
        return False


def run_dirs(base: Path) -> list[Path]:
    """Every run directory under ``base`` (one holding any of :data:`MARKERS`), oldest first (run
    ids sort by their start time). A hidden directory is never one: ``.importing-ID`` is a run
    ``runs import-log`` is still writing, ``.deleting-ID`` one ``runs delete`` is removing."""
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir()
                  if not p.name.startswith(".") and p.is_dir() and any((p / m).is_file() for m in MARKERS))


def load_summary(run_dir: Path) -> RunSummary:
    """The run's summary: ``summary.json`` when it is there (ValueError/OSError when it cannot be
    read), else :func:`recover`."""
    p = run_dir / "summary.json"
    if p.is_file():
        s = RunSummary.from_dict(json.loads(p.read_text()))
        s.run_dir = str(run_dir.resolve())  # where it is now: a runs dir copied or moved elsewhere says its new place
        return s
    return recover(run_dir)


def read_summary(run_dir: Path) -> RunSummary:
    """:func:`load_summary`, its failures one error: DataError (exit 3) naming ``summary.json``
    when it is there but not a readable run summary (not UTF-8, not JSON, not a summary object) —
    what ``runs show`` and ``runs report`` say of a damaged one."""
    from mfctl.errors import DataError

    try:
        return load_summary(run_dir)
    except (OSError, ValueError, TypeError) as e:
        raise DataError(f"not a readable run summary ({e})",
                        path=str(run_dir / "summary.json")) from None


def recover(run_dir: Path) -> RunSummary:
    """What a run without ``summary.json`` left: its run row and the leader's iterations from
    ``metrics.db`` (read-only), the reconfigurations recorded, and a status — ``running``,
    ``crashed`` or ``unknown`` (see the module doc) — with an ``error`` saying where the figures
    come from."""
    running = writer_alive(run_dir)
    kw: dict = {"run_id": run_dir.name, "playbook": "?", "inventory": "?", "run_dir": str(run_dir.resolve())}
    rows: list[dict] = []
    recs: list[dict] = []
    row = None
    try:
        from mfctl.metrics.store import read_only

        if not (run_dir / "metrics.db").is_file():
            raise sqlite3.OperationalError("no metrics.db")
        db = read_only(run_dir / "metrics.db")
        try:
            row = db.execute("SELECT run_id, playbook, inventory, time_scale FROM run").fetchone()
            cols = ("seconds", "tokens", "epoch", "paused", "inter_bytes", "ocs_bytes")
            rows = [dict(zip(cols, (r[0] or 0.0, r[1] or 0, r[2] or 0, bool(r[3]), r[4] or 0.0, r[5] or 0.0)))
                    for r in db.execute(f"SELECT {', '.join(cols)} FROM iterations "
                                        "WHERE host = (SELECT MIN(host) FROM iterations) ORDER BY iteration")]
            cur = db.execute("SELECT * FROM reconfigurations ORDER BY epoch")
            names = [d[0] for d in cur.description]
            recs = [dict(zip(names, r)) for r in cur.fetchall()]
        finally:
            db.close()
    except sqlite3.Error:
        pass  # no metrics.db or not one: only the directory's name is known
    planned = None
    if row is not None:
        kw.update(run_id=row[0] or run_dir.name, playbook=_name_of(row[1], "playbook"),
                  inventory=_name_of(row[2], "inventory"), time_scale=float(row[3] or 1.0))
        planned = _planned_iterations(row[1])
    status = "running" if running else "crashed" if row is not None else "unknown"
    why = ("still running: no summary.json yet" if running else
           "the run ended without writing summary.json (killed or crashed)" if row is not None else
           "no summary.json and no run row in metrics.db")
    s = RunSummary.of_iterations(iterations=rows, reconfigurations=[], prediction_errors={}, status=status,
                                 error=f"{why}; figures recovered from metrics.db" if rows or recs else why, **kw)
    s.reconfigurations = recs
    s.iterations_planned = planned or 0
    s.wall_train_s = None  # not known: the run did not live to say
    return s


def _name_of(path: str | None, kind: str) -> str:
    """The ``name:`` of the playbook or inventory file at ``path`` (what a summary shows), else the
    file's name, else ``?``."""
    if not path:
        return "?"
    try:
        if kind == "playbook":
            from mfctl.runtime.playbook import load_playbook

            return load_playbook(path).name
        from mfctl.inventory import load_inventory

        return load_inventory(path).name
    except (MfctlError, OSError) as e:  # gone, edited, unreadable: the file's name is what is left
        log.debug("run's %s %s not read: %s", kind, path, e)
        return Path(path).name


def _planned_iterations(playbook: str | None) -> int | None:
    try:
        from mfctl.runtime.playbook import load_playbook

        return load_playbook(playbook).training.iterations if playbook else None
    except (MfctlError, OSError) as e:  # gone or edited since the run: its plan is unknown
        log.debug("run's playbook %s not read: %s", playbook, e)
        return None
