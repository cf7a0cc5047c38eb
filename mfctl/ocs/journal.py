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
        self._fd: int | None = None

    def append(self, op: str, *, sync: bool = True, **fields) -> dict:
        """Append one record. With ``sync`` (the default) it is on disk (fdatasync) when this
        returns; with ``sync=False`` it is written (it survives the process being killed) and
        made durable by the next synced append — for records that recovery does not need
        (a command's completion, the read-back), never for intents or commands about to be sent."""
        with self._lock:
            self._seq += 1
            rec = {"ts": round(time.time(), 6), "seq": self._seq, "op": op, **fields}
            line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
            if self._fd is None:
                new = not self.path.exists()
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                if new:  # make the new directory entry durable too
                    dfd = os.open(self.path.parent, os.O_RDONLY)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
            os.write(self._fd, line.encode())
            if sync:
                os.fdatasync(self._fd)
            return rec

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

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
