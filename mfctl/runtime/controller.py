"""The controller's socket side: accepts runtime workers, queues their messages.

The training phase (:class:`mfctl.runtime.training.Training`) is the single consumer of :attr:`Controller.events`:
tuples ``(host, message)``; a dropped worker appears as ``(host, {"type": "_disconnected"})``.

Only an authenticated worker — a ``hello`` naming an expected host with the run's token —
ever produces an event. Before that a connection is a stranger's:

- its ``hello`` line may be at most :data:`HELLO_MAX` bytes and must have arrived in full
  within :data:`HELLO_TIMEOUT_S` of the connect (one deadline for the whole line, so a peer
  trickling one byte a second is cut off like a silent one);
- at most :data:`MAX_PENDING` connections wait for their hello at once; one more makes the
  controller drop the one that has waited longest (a real worker sends its hello at once, so
  a flood of idle connections cannot keep it out);
- a refusal (no or wrong token, unknown host, malformed or oversized line, too slow) answers
  ``stop`` (or ``error`` for a malformed line), closes, and logs a warning with the peer
  address and the claimed host name (sanitized, at most 64 characters; at most
  :data:`REFUSALS_LOGGED` warnings per minute). It produces no event: the run goes on.

A second ``hello`` with the right token for a host that is already connected is a protocol error
(:class:`~mfctl.runtime.protocol.DuplicateHost`): it is answered ``error`` with ``code``
``duplicate-host``, closed and logged like a refusal, and produces no event; the first connection
stays (the protocol has no reconnect). One runtime client per host is the contract: under
torchrun only local rank 0 connects (:meth:`mfctl.runtime.client.RuntimeClient.from_env`).
Authenticated lines are bounded by :data:`mfctl.runtime.protocol.MAX_LINE`.
"""

from __future__ import annotations

import hmac
import logging
import queue
import re
import socket
import threading
import time
from collections import OrderedDict
from typing import Callable

from mfctl.runtime.protocol import MAX_LINE, Connection, DuplicateHost, ProtocolError

log = logging.getLogger(__name__)

HELLO_MAX = 4096  # bytes: a hello line (host name + a 32-hex-digit token) is under 200
HELLO_TIMEOUT_S = 5.0  # seconds from connect to a complete hello line
MAX_PENDING = 16  # connections waiting for their hello at once
REFUSALS_LOGGED = 20  # refusal warnings per minute; the rest are counted, then summed up


def printable(value, limit: int = 64) -> str:
    """``value`` fit for a log line: letters, digits and ``._-`` kept, anything else ``?``,
    at most ``limit`` characters (``…`` marks a cut)."""
    s = value if isinstance(value, str) else repr(value)
    cut = len(s) > limit
    return re.sub(r"[^A-Za-z0-9._-]", "?", s[:limit]) + ("…" if cut else "")


class Controller:
    def __init__(self, *, token: str, welcome: Callable[[str], dict], expected_hosts: set[str],
                 listen: tuple[str, int] = ("127.0.0.1", 0), max_line: int = MAX_LINE):
        """``listen``: the address the hosts reach the controller on (never every interface
        by default) and port (0: any free one); ``max_line``: bytes per authenticated line."""
        self.token = token
        self.welcome = welcome
        self.expected = set(expected_hosts)
        self.max_line = max_line
        self.events: queue.Queue[tuple[str, dict]] = queue.Queue()
        self.workers: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._pending: OrderedDict[socket.socket, float] = OrderedDict()  # waiting for hello → connect time
        self._refusals: list[float] = []  # monotonic times of the refusal warnings of the last minute
        self._unlogged = 0  # refusals not logged one by one since the last warning
        family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        self.sock.listen(64)
        self.address = self.sock.getsockname()[:2]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="controller-accept").start()

    @property
    def address_str(self) -> str:
        h, p = self.address
        return f"[{h}]:{p}" if ":" in h else f"{h}:{p}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                s, peer = self.sock.accept()
            except OSError:
                return
            with self._lock:
                evicted = None
                if len(self._pending) >= MAX_PENDING:
                    evicted, _ = self._pending.popitem(last=False)
                self._pending[s] = time.monotonic()
            if evicted is not None:
                self._refused(None, "too many connections waiting for their hello: dropped the oldest")
                _shutdown(evicted)  # its reader wakes up with EOF and ends quietly
            threading.Thread(target=self._serve, args=(s, peer), daemon=True, name="controller-conn").start()

    def _refused(self, peer, why: str, host=None) -> None:
        """A warning for a refused connection, at most :data:`REFUSALS_LOGGED` a minute."""
        now = time.monotonic()
        with self._lock:
            self._refusals = [t for t in self._refusals if now - t < 60]
            if len(self._refusals) >= REFUSALS_LOGGED:
                self._unlogged += 1
                return
            self._refusals.append(now)
            more, self._unlogged = self._unlogged, 0
        who = f"{peer[0]}:{peer[1]}" if peer else "a runtime connection"
        claimed = f" (hello for host {printable(host)!r})" if host is not None else ""
        log.warning("controller: refused %s%s: %s%s", who, claimed, why,
                    f" (and {more} more refused connections not logged)" if more else "")

    def _serve(self, s: socket.socket, peer) -> None:
        conn = Connection(s, max_line=self.max_line)
        host = None
        try:
            hello = self._read_hello(conn, s, peer)
            host = self._admit(conn, peer, hello) if hello is not None else None
            if host is None or hello is None:
                return
            s.settimeout(None)
            conn.send({"type": "welcome", **self.welcome(host)})
            self.events.put((host, hello))
            while True:
                msg = conn.recv()
                if msg is None:
                    break
                self.events.put((host, msg))
                if msg.get("type") == "bye":  # acknowledged by closing: the worker may exit
                    break
        except ProtocolError as e:
            log.warning("runtime worker %s: protocol error: %s", host, e)
            _send_quietly(conn, e.message())
        except OSError as e:
            log.warning("runtime worker %s: %s", host, e)
        finally:
            conn.close()
            if host is not None:
                with self._lock:
                    if self.workers.get(host) is conn:
                        del self.workers[host]
                self.events.put((host, {"type": "_disconnected"}))

    def _read_hello(self, conn: Connection, s: socket.socket, peer) -> dict | None:
        """The connection's first message within :data:`HELLO_TIMEOUT_S` (at most
        :data:`HELLO_MAX` bytes); None when there is none (refused, or closed without a word)."""
        try:
            return conn.recv(max_line=HELLO_MAX, deadline=time.monotonic() + HELLO_TIMEOUT_S)
        except ProtocolError as e:
            self._refused(peer, f"protocol error: {e}")
            _send_quietly(conn, e.message())
        except OSError as e:  # the deadline, a reset, or dropped for a newer connection
            why = f"no complete hello within {HELLO_TIMEOUT_S:g} s" if isinstance(e, TimeoutError) else str(e)
            self._refused(peer, why or "connection closed")
        finally:
            with self._lock:
                self._pending.pop(s, None)
        return None

    def _admit(self, conn: Connection, peer, hello: dict) -> str | None:
        """The host a ``hello`` is for, registered as connected; None (refused) for a stranger or a
        bad token (told ``stop``), or a host whose runtime is already connected (told ``error``
        ``duplicate-host``; the first stays)."""
        claimed = hello.get("host")
        token = hello.get("token")
        ok = (hello.get("type") == "hello" and isinstance(claimed, str) and claimed in self.expected
              and isinstance(token, str) and hmac.compare_digest(token.encode(), self.token.encode()))
        if not ok or not isinstance(claimed, str):
            self._refused(peer, "not a hello" if hello.get("type") != "hello" else "unknown worker or bad token", claimed)
            _send_quietly(conn, {"type": "stop", "reason": "unknown worker or bad token"})
            return None
        with self._lock:
            taken = claimed in self.workers
            if not taken:
                self.workers[claimed] = conn
        if taken:
            err = DuplicateHost(f"a runtime for {claimed} is already connected (one runtime client per host: "
                                "torchrun's local rank 0); the first connection stays")
            self._refused(peer, f"protocol error ({err.code}): {err}", claimed)
            _send_quietly(conn, err.message())
            return None
        return claimed

    def send(self, host: str, msg: dict) -> bool:
        with self._lock:
            conn = self.workers.get(host)
        if conn is None:
            return False
        try:
            conn.send(msg)
            return True
        except OSError:
            return False

    def broadcast(self, hosts, msg: dict) -> list[str]:
        """Send to each host; return the hosts that could not be reached."""
        return [h for h in hosts if not self.send(h, msg)]

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self.workers.values())
            pending = list(self._pending)
        for c in conns:
            c.close()
        for s in pending:
            _shutdown(s)


def _send_quietly(conn: Connection, msg: dict) -> None:
    """Best effort: a refused peer may have gone already."""
    try:
        conn.sock.settimeout(1.0)
        conn.send(msg)
    except OSError:
        pass


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
