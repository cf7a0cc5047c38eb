"""The mock testbed's end of :mod:`mfctl.mock.relay`: one unix socket per mock host.

:class:`RelayServer` listens on ``<state>/hosts/<name>.sock`` (mode 0600, in the 0700 state
directory); every connection is one SSH session that a real sshd started. Its command is run by
``on_exec(command, channel)`` (``MockHost.handle``) in a thread of its own with a
:class:`RelayChannel` — the part of paramiko's ``Channel`` the mock hosts use — and the exit
status it returns is sent back (negative ``-N``: killed by signal N).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable

from mfctl.mock.relay import CHUNK, HEADER, frame, parse_hello

log = logging.getLogger(__name__)

STDIN_BUFFER_MAX = 16 << 20  # bytes of stdin held for a command that does not read it (then the relay waits)
HELLO_TIMEOUT_S = 10.0  # the relay sends its hello at once after connecting
HELLO_MAX = 1 << 20  # a command line longer than this is not one a client sends (sshd's own limit is 256 KiB)


class RelayChannel:
    """One session as a paramiko-like channel: ``send``/``sendall`` (stdout),
    ``send_stderr``/``sendall_stderr``, ``recv(n)`` (stdin; ``b""`` at its end; raises
    ``socket.timeout`` after ``settimeout(s)``), ``closed`` (the session hung up), ``eof_received``
    (stdin ended; ``eof_is_hangup`` False: a command goes on after it, as on a real host),
    ``pty`` / ``mfctl_pty`` (the client asked for a terminal), ``get_transport()``
    (itself: ``is_active()`` while not hung up), ``signals`` (signal numbers received, in order)
    and ``on_signal`` (called with each one, from the reader thread, when set)."""

    def __init__(self, sock: socket.socket, command: str | None, pty: bool):
        self.sock = sock
        self.command = command
        self.pty = self.mfctl_pty = bool(pty)
        self.closed = False
        self.eof_received = False
        self.eof_is_hangup = False
        self.signals: list[int] = []
        self.on_signal: Callable[[int], None] | None = None
        self._timeout: float | None = None
        self._stdin = bytearray()
        self._cv = threading.Condition()
        self._send_lock = threading.Lock()

    # --- the mock host's side ------------------------------------------------------------
    def _send(self, kind: bytes, data: bytes) -> None:
        if self.closed:
            raise OSError("the session hung up")
        try:
            with self._send_lock:
                for i in range(0, len(data), CHUNK):
                    self.sock.sendall(frame(kind, bytes(data[i:i + CHUNK])))
        except OSError:
            self._hang_up()
            raise

    def sendall(self, data: bytes) -> None:
        self._send(b"O", data)

    def send(self, data: bytes) -> int:
        self._send(b"O", data)
        return len(data)

    def sendall_stderr(self, data: bytes) -> None:
        self._send(b"R", data)

    def send_stderr(self, data: bytes) -> int:
        self._send(b"R", data)
        return len(data)

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def recv(self, n: int) -> bytes:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._cv:
            while not self._stdin and not self.eof_received and not self.closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise socket.timeout("stdin: no data")
                self._cv.wait(left)
            data = bytes(self._stdin[:n])
            del self._stdin[:n]
            self._cv.notify_all()
            return data

    def get_transport(self) -> "RelayChannel":
        return self

    def is_active(self) -> bool:
        return not self.closed

    # --- the relay's side ------------------------------------------------------------------
    def _hang_up(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def read_relay(self) -> None:
        """Reader thread: stdin, its end and signals from the relay until it hangs up."""
        buf = bytearray()
        try:
            while True:
                data = self.sock.recv(CHUNK)
                if not data:
                    break
                buf += data
                while len(buf) >= HEADER.size:
                    kind, n = HEADER.unpack_from(buf)
                    if len(buf) < HEADER.size + n:
                        break
                    payload = bytes(buf[HEADER.size:HEADER.size + n])
                    del buf[:HEADER.size + n]
                    if kind == b"I":
                        with self._cv:
                            while len(self._stdin) > STDIN_BUFFER_MAX and not self.closed:
                                self._cv.wait(1.0)
                            self._stdin += payload
                            self._cv.notify_all()
                    elif kind == b"E":
                        with self._cv:
                            self.eof_received = True
                            self._cv.notify_all()
                    elif kind == b"S":
                        sig = int(payload)
                        self.signals.append(sig)
                        if self.on_signal is not None:
                            try:
                                self.on_signal(sig)
                            except Exception:  # a gone process: nothing to signal
                                log.debug("signal %d not delivered", sig, exc_info=True)
        except OSError:
            pass
        finally:
            self._hang_up()

    def finish(self, rc: int) -> None:
        """Send the exit status (``-N``: killed by signal N) and end the session."""
        try:
            with self._send_lock:
                self.sock.sendall(frame(b"X", str(int(rc)).encode()))
        except OSError:
            pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def _read_hello(sock: socket.socket) -> tuple[str | None, bool]:
    sock.settimeout(HELLO_TIMEOUT_S)
    buf = b""
    while len(buf) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(buf))
        if not chunk:
            raise ConnectionError("the relay closed before its hello")
        buf += chunk
    kind, n = HEADER.unpack(buf)
    if kind != b"H" or n > HELLO_MAX:
        raise ConnectionError(f"expected a hello frame of at most {HELLO_MAX} bytes, got {kind!r} of {n}")
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            raise ConnectionError("the relay closed in its hello")
        body += chunk
    sock.settimeout(None)
    return parse_hello(body)


class RelayServer:
    """Listen on the unix socket ``path`` (mode 0600) for one mock host's sessions."""

    def __init__(self, name: str, path: str | Path, on_exec: Callable[[str, RelayChannel], int]):
        self.name = name
        self.path = Path(path)
        self.on_exec = on_exec
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: no window in which another user could connect
        try:
            self.sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.sock.listen(128)
        self.sessions: set[RelayChannel] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name=f"relay-{name}").start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            command, pty = _read_hello(conn)
        except (OSError, ValueError) as e:
            log.warning("%s: relay session refused: %s", self.name, e)
            conn.close()
            return
        chan = RelayChannel(conn, command, pty)
        with self._lock:
            self.sessions.add(chan)
        threading.Thread(target=chan.read_relay, daemon=True).start()
        try:
            if command is None:  # a shell: the mock hosts take commands only
                chan.sendall_stderr(b"mock host: an interactive shell is not modelled; give a command\n")
                rc = 1
            else:
                rc = self.on_exec(command, chan)
        except Exception as e:  # a handler bug must not kill the server thread silently
            log.exception("%s: exec handler failed for %r", self.name, command)
            try:
                chan.sendall_stderr(f"mock: internal error: {e}\n".encode())
            except OSError:
                pass
            rc = 255
        finally:
            with self._lock:
                self.sessions.discard(chan)
        chan.finish(int(rc or 0))

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        self.path.unlink(missing_ok=True)
        with self._lock:
            for chan in list(self.sessions):
                chan._hang_up()
