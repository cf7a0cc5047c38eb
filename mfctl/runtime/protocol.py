"""The mfctl runtime protocol, version 1: JSON lines over TCP (docs/runtime-protocol.md).

Every message is one JSON object on one line with a ``type`` and the protocol version
``v``. Worker → controller: ``hello``, ``traffic``, ``iteration``, ``paused``,
``resume``, ``log``, ``error``, ``bye``. Controller → worker: ``welcome``, ``propose``,
``applied``, ``routes``, ``stop``, ``error``.
"""

from __future__ import annotations

import json
import socket
import threading

VERSION = 1
MAX_LINE = 16 * 1024 * 1024  # bytes; a larger line is a protocol error

WORKER_TYPES = {"hello", "traffic", "iteration", "paused", "resume", "log", "error", "bye"}
CONTROLLER_TYPES = {"welcome", "propose", "applied", "routes", "stop", "error"}


class ProtocolError(Exception):
    """A peer sent something that is not a valid protocol-v1 message."""


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
    """A framed, thread-safe (for sending) JSON-lines connection."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._rfile = sock.makefile("rb")
        self._wlock = threading.Lock()

    def send(self, msg: dict) -> None:
        data = encode(msg)
        with self._wlock:
            self.sock.sendall(data)

    def recv(self) -> dict | None:
        """Next message, or None at EOF. Raises ProtocolError / OSError."""
        line = self._rfile.readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE:
            raise ProtocolError("line too long")
        return decode(line)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
