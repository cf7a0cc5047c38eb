"""Append-only, fsync'd JSON-lines journal of changes to hardware state.

Each record is one line: ``{"ts": unix seconds, "seq": n, "op": ..., ..., "crc": c}`` where
``crc`` is the CRC-32 (zlib) of the line's JSON text without its ``crc`` field, so a damaged
record is told apart from a good one. A record is on disk (written in full and fdatasync'd)
before :meth:`Journal.append` returns, so an interrupted change can be recovered.

Damage is expected, never glued: a crash or a full disk can leave a *torn* last line (no
newline). The next writer seals it first — a newline ends the fragment so it stays a record
of its own, reported as ``{"op": "torn", ...}`` by :meth:`Journal.records`, and a
``journal.sealed`` record says where — and only then appends. A short write is completed or
raises :class:`JournalError`; nothing that needs a record (an intent, a command about to be
sent) proceeds without it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import zlib
from pathlib import Path

from mfctl.errors import OperationFailed


class JournalError(OperationFailed):
    """A record could not be written in full (disk full, I/O error): the change stops here."""


def _crc(text: str) -> int:
    return zlib.crc32(text.encode()) & 0xFFFFFFFF


def encode_record(rec: dict) -> str:
    """One journal line (with its newline): the record's JSON with ``crc`` appended."""
    body = json.dumps(rec, separators=(",", ":"), default=str)
    return body[:-1] + f',"crc":{_crc(body)}}}\n'


_CRC_TAIL = re.compile(r',"crc":(\d+)}$')


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} twice")
    return dict(pairs)


def decode_line(line: str) -> dict:
    """A record from one line: the record, or ``{"op": "corrupt", "raw", "why"}`` when it is not
    JSON or its ``crc`` does not match (records written before checksums have none: trusted)."""
    try:
        rec = json.loads(line, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        return {"op": "corrupt", "raw": line[:2000], "why": f"not JSON ({e.msg} at column {e.colno})"}
    except (ValueError, RecursionError) as e:  # a key twice, a 5000-digit number, [[[[…]]]]
        return {"op": "corrupt", "raw": line[:2000], "why": f"not a record ({str(e)[:80] or type(e).__name__})"}
    if not isinstance(rec, dict):
        return {"op": "corrupt", "raw": line[:2000], "why": "not a JSON object"}
    m = _CRC_TAIL.search(line)
    if "crc" in rec:
        if not m or _crc(line[: m.start()] + "}") != rec["crc"]:
            return {"op": "corrupt", "raw": line[:2000], "why": "checksum mismatch"}
        del rec["crc"]
    why = _malformed(rec)
    if why:
        return {"op": "corrupt", "raw": line[:2000], "why": why}
    return rec


_PAIRS_FIELDS = ("before", "desired", "chain_before", "chain_desired", "readback")


def _malformed(rec: dict) -> str | None:
    """Why a record's fields cannot be what mfctl wrote, or None: ``op``, ``ts`` and ``seq`` of any
    record, and the fields of the OCS's (``ocs.*``) records. Checked for every record, and the
    only check of one without ``crc`` (older, or written by hand)."""
    if not isinstance(rec.get("op"), str):
        return "no op"
    if "ts" in rec and (not isinstance(rec["ts"], (int, float)) or isinstance(rec["ts"], bool)):
        return "ts is not a number"
    if "seq" in rec and (not isinstance(rec["seq"], int) or isinstance(rec["seq"], bool)):
        return "seq is not an integer"
    if not rec["op"].startswith("ocs."):  # the fields below are the OCS records' (run and provision journals differ)
        return None
    for k in ("apply_id", "chain"):
        if k in rec and rec[k] is not None and not isinstance(rec[k], str):
            return f"{k} is not a string"
    for k in _PAIRS_FIELDS:
        v = rec.get(k)
        if v is not None and not (isinstance(v, list) and all(
                isinstance(x, list) and len(x) == 2 and all(isinstance(y, int) and not isinstance(y, bool) for y in x)
                for x in v)):
            return f"{k} is not a list of [input, output] port numbers"
        if v is not None and (len({x[0] for x in v}) != len(v) or len({x[1] for x in v}) != len(v)):
            return f"{k} uses a port twice"
    for k in ("ok", "unchanged", "matches", "changed", "auto"):
        if k in rec and rec[k] is not None and not isinstance(rec[k], bool):
            return f"{k} is not true/false"
    if "diff" in rec and not (isinstance(rec["diff"], dict) and all(
            isinstance(rec["diff"].get(k, []), list) for k in ("delete", "add"))):
        return "diff is not {delete, add, keep}"
    for k in ("verb", "aid", "state", "reason", "mode", "error"):
        if k in rec and rec[k] is not None and not isinstance(rec[k], str):
            return f"{k} is not a string"
    if rec["op"] == "ocs.intent" and not (isinstance(rec.get("apply_id"), str) and "before" in rec and "desired" in rec):
        return "an intent without apply_id, before and desired"
    return None


#: A journal above this size is rotated (to ``<name>.1.jsonl``) when no change is pending, so that
#: reading it (every mutating session reads it once) stays quick: 8 MiB ≈ 25 000 records, read in
#: ~0.5 s and ~90 MB (parsed records take about 11 times their size).
ROTATE_BYTES = 8 << 20


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq: int | None = None  # read from the file's tail at the first append (reads parse nothing)
        self._fd: int | None = None

    def _last_seq(self) -> int:
        """The last record's ``seq``, from the file's last 64 KiB (0 for an empty journal; the whole
        file is read only when that tail holds no readable record)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 65536))
                tail = f.read().split(b"\n")
        except FileNotFoundError:
            return 0
        for ln in reversed(tail):
            rec = decode_line(ln.decode("utf-8", errors="replace")) if ln.strip() else {}
            if isinstance(rec.get("seq"), int):
                return rec["seq"]
        if size <= 65536:
            return 0
        # the last 64 KiB hold no readable record (damage): count the whole file, once
        recs = self.records()
        return max([r["seq"] for r in recs if isinstance(r.get("seq"), int)] + [len(recs)])

    def rotate_if_large(self, limit: int = ROTATE_BYTES) -> Path | None:
        """Move the journal to ``<name>.1.jsonl`` (replacing an older one) when it is above
        ``limit`` bytes. Call only when no change is pending in it. Returns the new path."""
        with self._lock:
            try:
                if self.path.stat().st_size <= limit:
                    return None
            except FileNotFoundError:
                return None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            old = self.path.with_name(self.path.name.removesuffix(".jsonl") + ".1.jsonl")
            os.replace(self.path, old)
            self._seq = 0
            return old

    def _open(self) -> int:
        new = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        if new:  # make the new directory entry durable too
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return fd
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line: seal it, never glue onto it
            start = self._line_start(fd, size)
            self._write_all(fd, b"\n")
            if self._seq is None:  # (append() has read it already)
                self._seq = self._last_seq()
            self._seq += 1
            rec = {"ts": round(time.time(), 6), "seq": self._seq, "op": "journal.sealed", "offset": start,
                   "bytes": size - start, "why": "the last record was torn (no newline): kept as its own line"}
            self._write_all(fd, encode_record(rec).encode())
            os.fdatasync(fd)
        return fd

    @staticmethod
    def _line_start(fd: int, size: int) -> int:
        pos = size
        while pos > 0:
            k = max(0, pos - 65536)
            chunk = os.pread(fd, pos - k, k)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return k + i + 1
            pos = k
        return 0

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
            except OSError as e:
                raise JournalError(f"journal write failed after {len(data) - len(view)} of {len(data)} bytes: "
                                   f"{e.strerror or e}") from e
            if n <= 0:
                raise JournalError(f"journal write made no progress ({len(view)} bytes left)")
            view = view[n:]

    def append(self, op: str, *, sync: bool = True, **fields) -> dict:
        """Append one record. With ``sync`` (the default) it is on disk (fdatasync) when this
        returns; with ``sync=False`` it is written (it survives the process being killed) and
        made durable by the next synced append — for records that recovery does not need
        (a command's completion, the read-back), never for intents or commands about to be sent.
        Raises :class:`JournalError` when the record cannot be written in full."""
        with self._lock:
            if self._seq is None:
                self._seq = self._last_seq()
            if self._fd is None:
                self._fd = self._open()
            self._seq += 1
            rec = {"ts": round(time.time(), 6), "seq": self._seq, "op": op, **fields}
            self._write_all(self._fd, encode_record(rec).encode())
            if sync:
                try:
                    os.fdatasync(self._fd)
                except OSError as e:
                    raise JournalError(f"journal fdatasync failed: {e.strerror or e}") from e
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
        """Every record in order. A damaged line is ``{"op": "corrupt", ...}``; a last line
        without its newline (torn, not yet sealed) is ``{"op": "torn", "raw": ...}``."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:  # line by line: the file is never held whole
            for ln in f:
                if not ln.endswith(b"\n"):  # the last line, without its newline
                    if ln.strip():
                        out.append({"op": "torn", "raw": ln.decode("utf-8", errors="replace")[:2000],
                                    "why": "last record has no newline (a write was cut short)"})
                    break
                if ln.strip():
                    out.append(decode_line(ln[:-1].decode("utf-8", errors="replace")))
        return out
