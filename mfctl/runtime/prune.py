"""Which runs ``mfctl runs prune`` and ``mfctl runs delete`` take away, and taking them away.

A run still being written (its ``mfctl run`` alive: :func:`mfctl.runtime.rundir.writer_alive`) is
never chosen nor deleted, whatever was asked; it is checked again just before its directory goes.
A run's age is from the start time in its id (``YYYYmmdd-HHMMSS-…``, local time), else from its
directory's last change.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mfctl.runtime.rundir import run_dirs, writer_alive

#: the statuses ``runs prune --status`` takes (a run's summary status, or what :func:`mfctl.runtime.rundir.recover`
#: says of a run that wrote none); ``running`` is not one: a running run is never deleted
PRUNABLE_STATUSES = ("ok", "failed", "interrupted", "crashed", "unknown")
DAY_S = 86400.0


@dataclass
class RunEntry:
    """One run directory as prune sees it: id, status, start time (epoch s), whether it is running."""

    run_id: str
    path: Path
    status: str
    started: float
    running: bool

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "path": str(self.path),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started))}


def started_at(run_dir: Path) -> float:
    """The run's start (epoch seconds): its id's ``YYYYmmdd-HHMMSS`` prefix, else the directory's mtime."""
    try:
        return time.mktime(time.strptime(run_dir.name[:15], "%Y%m%d-%H%M%S"))
    except ValueError:
        return run_dir.stat().st_mtime


def status_of(run_dir: Path) -> str:
    """``running`` while its writer lives, else its summary's status (``crashed``/``unknown`` for a
    run without one, :func:`mfctl.runtime.rundir.recover`), ``unknown`` for a summary that cannot be read."""
    from mfctl.runtime.rundir import load_summary

    if writer_alive(run_dir):
        return "running"
    try:
        return load_summary(run_dir).status
    except (OSError, ValueError, TypeError):
        return "unknown"


def entries(base: Path) -> list[RunEntry]:
    """Every run under ``base``, oldest first."""
    out = []
    for rd in run_dirs(base):
        if rd.name.startswith("."):  # (a run being deleted: renamed first)
            continue
        st = status_of(rd)
        out.append(RunEntry(rd.name, rd, st, started_at(rd), st == "running"))
    return sorted(out, key=lambda e: (e.started, e.run_id))


def select(base: Path, *, keep: int | None = None, older_than_days: float | None = None,
           statuses: list[str] | None = None, now: float | None = None) -> tuple[list[RunEntry], list[RunEntry]]:
    """The runs ``runs prune`` would delete — those matching every criterion given: not among the
    ``keep`` newest runs, started more than ``older_than_days`` days ago, with one of ``statuses``
    — and the running runs that matched and are kept anyway. UsageError when no criterion is
    given (prune never means "everything") or a status is not one of :data:`PRUNABLE_STATUSES`."""
    from mfctl.errors import UsageError

    if keep is None and older_than_days is None and not statuses:
        raise UsageError("say what to prune: --keep N, --older-than DAYS and/or --status STATUS "
                         "(mfctl runs delete RUN… deletes runs by id)")
    for s in statuses or []:
        if s == "running":
            raise UsageError("--status running: a running run is never deleted")
        if s not in PRUNABLE_STATUSES:
            raise UsageError(f"--status {s!r} is not one of {', '.join(PRUNABLE_STATUSES)}")
    runs = entries(base)
    now = time.time() if now is None else now
    newest = {e.run_id for e in runs[len(runs) - keep:]} if keep else set()
    matched = [e for e in runs
               if e.run_id not in newest
               and (older_than_days is None or now - e.started > older_than_days * DAY_S)
               and (not statuses or e.status in statuses or e.running)]
    return [e for e in matched if not e.running], [e for e in matched if e.running]


def named(base: Path, run_ids: list[str]) -> list[RunEntry]:
    """The runs ``run_ids`` name (in the order given, once each). UsageError for an id that is
    no run under ``base`` (nothing is chosen then)."""
    from mfctl.errors import UsageError

    by_id = {e.run_id: e for e in entries(base)}
    bad = [r for r in run_ids if r not in by_id or "/" in r or r.startswith(".")]
    if bad:
        raise UsageError(f"no run {', '.join(map(repr, bad))} in {base} (see mfctl runs list); nothing was deleted")
    return [by_id[r] for r in dict.fromkeys(run_ids)]


def delete(base: Path, e: RunEntry) -> None:
    """Delete the run directory ``e`` (a directory right under ``base``, never a link out of it),
    unless its writer has come alive: OperationFailed then, the directory untouched."""
    from mfctl.errors import OperationFailed

    p = base / e.run_id
    if p.is_symlink() or not p.is_dir() or p.resolve().parent != base.resolve():
        raise OperationFailed(f"{p}: not a run directory under {base}: not deleted")
    if writer_alive(p):
        raise OperationFailed(f"run {e.run_id} is running: not deleted")
    # rename first: a reader (runs list, metrics serve) never sees a half-deleted run
    gone = p.with_name(f".deleting-{e.run_id}-{os.getpid()}")
    p.rename(gone)
    shutil.rmtree(gone)
