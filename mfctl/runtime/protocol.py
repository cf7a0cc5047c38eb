"""The mfctl runtime protocol, version 1: JSON lines over TCP (docs/runtime-protocol.md).

Every message is one JSON object on one line with a ``type`` and the protocol version
``v``. Worker → controller: ``hello``, ``traffic``, ``iteration``, ``paused``,
``resume``, ``log``, ``error``, ``bye``. Controller → worker: ``welcome``, ``propose``,
``applied``, ``routes``, ``stop``, ``error``.

An ``error`` may carry a ``code`` naming the refusal, so that a peer can tell one from another
without reading the text: :data:`DUPLICATE_HOST` (a second ``hello`` for a host whose runtime is
already connected: one runtime client per host, torchrun's local rank 0).
"""

from __future__ import annotations

import json
import socket
import threading
import time

VERSION = 1
#: bytes; the longest line of an authenticated peer (a ``traffic`` message of 32 layers for a
#: region of 128 servers is about 6 MiB); a longer line is a protocol error
MAX_LINE = 16 * 1024 * 1024

WORKER_TYPES = {"hello", "traffic", "iteration", "paused", "resume", "log", "error", "bye"}
CONTROLLER_TYPES = {"welcome", "propose", "applied", "routes", "stop", "error"}


#: ``error.code`` of the refusal of a second ``hello`` for a host that is already connected
DUPLICATE_HOST = "duplicate-host"


class ProtocolError(Exception):
    """A peer sent something that is not a valid protocol-v1 message, or a message the protocol
    forbids at that point. ``code``: the ``error`` message's ``code`` that says so (or None)."""

    code: str | None = None

    def message(self) -> dict:
        """The ``error`` message that tells the peer."""
        return {"type": "error", "message": f"protocol error: {self}", **({"code": self.code} if self.code else {})}


class DuplicateHost(ProtocolError):
    """A ``hello`` (right token) for a host whose runtime is already connected. The protocol has
    one runtime connection per host and no reconnect: the second is refused, the first stays."""

    code = DUPLICATE_HOST


def encode(msg: dict) -> bytes:
    if "type" not in msg:
        raise ValueError("message without type")
    return (json.dumps({"v": VERSION, **msg}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict:
    try:
        msg = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProtocolError(f"not JSON: {line[:80]!r}") from e
    if not isinstance(msg, dict) or "type" not in msg:
        raise ProtocolError(f"not a message object: {line[:80]!r}")
    if msg.get("v") != VERSION:
        raise ProtocolError(f"protocol version {msg.get('v')!r} not supported (want {VERSION})")
    return msg


class Connection:
    """A framed, thread-safe (for sending) JSON-lines connection.

    Lines are read into a buffer of at most ``max_line`` + 1 bytes: a longer
    line is refused with :class:`ProtocolError` as soon as it is seen to be too long, never
    buffered whole."""

    CHUNK = 65536  # bytes per socket read

    def __init__(self, sock: socket.socket, max_line: int = MAX_LINE):
        self.sock = sock
        self.max_line = max_line
        self._buf = bytearray()
        self._wlock = threading.Lock()

    def send(self, msg: dict) -> None:
        data = encode(msg)
        with self._wlock:
            self.sock.sendall(data)

    def recv(self, *, max_line: int | None = None, deadline: float | None = None) -> dict | None:
        """Next message, or None at EOF. ``max_line``: bytes (default: the connection's);
        ``deadline``: a :func:`time.monotonic` time by which the whole line must have arrived
        (``socket.timeout`` after it, however slowly the bytes trickle in). Raises
        ProtocolError / OSError."""
        limit = self.max_line if max_line is None else max_line
        seen = 0  # bytes of the buffer already searched for the newline
        prev = self.sock.gettimeout() if deadline is not None else None
        try:
            while True:
                i = self._buf.find(b"\n", seen)
                if i >= 0:
                    if i > limit:
                        raise ProtocolError(f"line longer than {limit} bytes")
                    line = bytes(self._buf[:i + 1])
                    del self._buf[:i + 1]
                    return decode(line)
                if len(self._buf) > limit:
                    self._buf.clear()
                    raise ProtocolError(f"line longer than {limit} bytes")
                seen = len(self._buf)
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise socket.timeout("timed out")
                    self.sock.settimeout(left)
                data = self.sock.recv(min(self.CHUNK, limit + 1 - len(self._buf)))
                if not data:
                    if not self._buf:
                        return None
                    line = bytes(self._buf)  # the last line, without its newline
                    self._buf.clear()
                    return decode(line)
                self._buf += data
        finally:
            if deadline is not None:
                self.sock.settimeout(prev)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
