"""The controller's socket side: accepts runtime workers, queues their messages.

The job loop (:mod:`mfctl.runtime.job`) is the single consumer of :attr:`Controller.events`:
tuples ``(host, message)``; a dropped worker appears as ``(host, {"type": "_disconnected"})``.
"""

from __future__ import annotations

import hmac
import logging
import queue
import socket
import threading
from typing import Callable

from mfctl.runtime.protocol import Connection, ProtocolError

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, *, token: str, welcome: Callable[[str], dict], expected_hosts: set[str],
                 listen: tuple[str, int] = ("127.0.0.1", 0)):
        self.token = token
        self.welcome = welcome
        self.expected = set(expected_hosts)
        self.events: queue.Queue[tuple[str, dict]] = queue.Queue()
        self.workers: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        self.sock.listen(64)
        self.address = self.sock.getsockname()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="controller-accept").start()

    @property
    def address_str(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s: socket.socket) -> None:
        conn = Connection(s)
        host = None
        try:
            s.settimeout(10.0)
            hello = conn.recv()
            s.settimeout(None)
            if not hello or hello.get("type") != "hello":
                raise ProtocolError(f"expected hello, got {hello}")
            host = str(hello.get("host"))
            if not hmac.compare_digest(str(hello.get("token", "")), self.token) or host not in self.expected:
                conn.send({"type": "stop", "reason": "unknown worker or bad token"})
                conn.close()
                log.warning("refused runtime worker %r", host)
                return
            with self._lock:
                self.workers[host] = conn
            conn.send({"type": "welcome", **self.welcome(host)})
            self.events.put((host, hello))
            while True:
                msg = conn.recv()
                if msg is None:
                    break
                self.events.put((host, msg))
                if msg.get("type") == "bye":  # acknowledged by closing: the worker may exit
                    conn.close()
                    break
        except ProtocolError as e:
            log.warning("runtime worker %s: protocol error: %s", host, e)
            try:
                conn.send({"type": "error", "message": f"protocol error: {e}"})
            except OSError:
                pass
            conn.close()
        except OSError as e:
            log.warning("runtime worker %s: %s", host, e)
        finally:
            if host is not None:
                with self._lock:
                    if self.workers.get(host) is conn:
                        del self.workers[host]
                self.events.put((host, {"type": "_disconnected"}))

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
        for c in conns:
            c.close()
