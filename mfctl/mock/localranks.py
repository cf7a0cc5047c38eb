"""The simulated runtime's other local ranks: they run, but only local rank 0 talks to mfctl.

torchrun starts ``--nproc-per-node`` processes per host (``LOCAL_RANK`` 0 … N-1, each in a session
of its own). By the runtime protocol's contract one runtime client per host connects to the
controller: local rank 0 (:meth:`mfctl.runtime.client.RuntimeClient.from_env`). On hardware the
other ranks train beside it, bound to it by their collectives; the simulated runtime's other
ranks stand for them at no cost: each *follows* local rank 0 of its agent and ends with it.

- Local rank 0 (:class:`Leader`) listens on an abstract unix socket named after its torchrun agent
  (the parent process) and its node rank (``GROUP_RANK``); at its normal end it tells every
  follower its exit status (``done RC``) and closes.
- A follower (:func:`follow`) connects (retrying for :data:`CONNECT_TIMEOUT_S` while local rank 0
  starts) and waits for that word: ``done 0`` ends it with 0. When local rank 0 dies without a word
  (a crash) or ends with an error, the follower hangs as a rank waiting in a collective would,
  until the agent stops it (torchrun SIGTERMs the other ranks of a failed group), at most
  :data:`COLLECTIVE_TIMEOUT_S`; then it exits 1 ("collective timed out").

Nothing here imports numpy or the step model: a follower costs a Python start and a socket.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

CONNECT_TIMEOUT_S = 30.0  # wall seconds a follower waits for local rank 0's socket (torchrun starts them together)
CONNECT_RETRY_S = 0.05  # seconds between connection attempts while local rank 0 is starting
COLLECTIVE_TIMEOUT_S = 60.0  # wall seconds a follower outlives a failed local rank 0 (NCCL's own default: 10 min)


def socket_name(environ=None) -> str:
    """The abstract socket (leading NUL) of this host's local rank 0: one per torchrun agent
    (the parent process of every local rank) and node rank."""
    env = os.environ if environ is None else environ
    return f"\0mfctl-simrt/{os.getppid()}/{env.get('GROUP_RANK', '0')}"


class Leader:
    """Local rank 0's side: accepts the followers (in a daemon thread) and tells them the end."""

    def __init__(self, name: str | None = None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(name or socket_name())
        self.sock.listen(64)
        self.followers: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="local-ranks").start()

    def _accept(self) -> None:
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.followers.append(s)

    def done(self, rc: int) -> None:
        """Tell every follower that local rank 0 ended with ``rc``, and close."""
        try:
            self.sock.close()
        except OSError:
            pass
        with self._lock:
            followers, self.followers = self.followers, []
        for s in followers:
            try:
                s.settimeout(1.0)
                s.sendall(f"done {rc}\n".encode())
            except OSError:
                pass
            finally:
                s.close()


def follow(name: str | None = None, *, label: str = "") -> int:
    """A follower's life: the exit status it ends with (see the module docstring)."""
    name = name or socket_name()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            s.connect(name)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                print(f"mfctl-simrt{label}: local rank 0 did not start within {CONNECT_TIMEOUT_S:g} s", file=sys.stderr,
                      flush=True)
                return 1
            time.sleep(CONNECT_RETRY_S)
    s.settimeout(None)
    buf = b""
    while chunk := s.recv(64):
        buf += chunk
    s.close()
    word = buf.decode(errors="replace").split()
    if word[:2] == ["done", "0"]:
        return 0
    # local rank 0 crashed or failed: a real rank would wait in its next collective until stopped
    time.sleep(COLLECTIVE_TIMEOUT_S)
    print(f"mfctl-simrt{label}: local rank 0 ended ({' '.join(word) or 'without a word'}); collective timed out "
          f"after {COLLECTIVE_TIMEOUT_S:g} s", file=sys.stderr, flush=True)
    return 1
