"""Append-only, fsync'd JSON-lines journal of changes to hardware state.

Each record: ``{"ts": unix seconds, "seq": n, "op": ..., ...}``. A record is on disk
(flushed and fsync'd) before :meth:`Journal.append` returns, so an interrupted change can
be recovered from the journal.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = sum(1 for _ in open(self.path)) if self.path.exists() else 0

    def append(self, op: str, **fields) -> dict:
        with self._lock:
            self._seq += 1
            rec = {"ts": round(time.time(), 6), "seq": self._seq, "op": op, **fields}
            line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            return rec

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for ln in self.path.read_text().splitlines():
            try:
                out.append(json.loads(ln))
            except json.JSONDecodeError:
                out.append({"op": "corrupt", "raw": ln})
        return out


def ocs_journal_path(inv) -> Path:
    """The OCS's own journal, kept across runs: ``<state_dir>/ocs/<inventory>-<ocs>.journal.jsonl``."""
    from mfctl import settings

    return settings.state_dir() / "ocs" / f"{inv.name}-{inv.ocs.name}.journal.jsonl"
