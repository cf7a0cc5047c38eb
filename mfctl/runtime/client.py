"""Client library for a training job's runtime (a Megatron hook, or the mock's simulator).

Usage from a training loop::

    rt = RuntimeClient.from_env()            # controller, host and run token from the environment
    cfg = rt.connect()                       # -> the controller's welcome (job config, routes)
    for it in range(...):
        for msg in rt.poll():                # at a safe point (iteration boundary)
            if msg["type"] == "propose": pause OCS-path traffic; rt.paused(msg["epoch"], it)
            elif msg["type"] == "routes": install msg["routes"]; rt.resume(msg["epoch"], it)
            elif msg["type"] == "stop": break
        rt.traffic(it, matrices)             # leader only: per-layer server x server bytes
        ...
        rt.iteration(it, seconds=..., tokens=...)
    rt.bye()

Every call has a timeout; a lost controller raises :class:`ControllerLost`.
"""

from __future__ import annotations

import os
import queue
import socket
import threading

from mfctl.runtime.protocol import Connection, ProtocolError


class ControllerLost(ConnectionError):
    """The connection to the controller broke."""


class HelloRefused(ControllerLost):
    """The controller answered the ``hello`` with something else than ``welcome``: ``reply`` is
    its answer (``stop`` for a stranger or a bad token, ``error`` with ``code``
    ``duplicate-host`` when this host's runtime is already connected), ``code`` its ``code``."""

    def __init__(self, message: str, reply: dict | None):
        super().__init__(message)
        self.reply = reply or {}
        self.code: str | None = self.reply.get("code")


def local_rank(environ=None) -> int:
    """This process's local rank on its host: ``LOCAL_RANK`` (torchrun sets it, also under
    ``srun torchrun``), else ``SLURM_LOCALID`` (a task of ``srun`` without torchrun), else 0.
    Raises ValueError for a value that is not a non-negative integer."""
    env = os.environ if environ is None else environ
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        raw = env.get(name)
        if raw is not None and raw != "":
            if not raw.isdigit():
                raise ValueError(f"{name}={raw[:20]!r}: expected a non-negative integer")
            return int(raw)
    return 0


def token_from_env(environ=None) -> str:
    """The run token: ``MFCTL_RUN_TOKEN`` if set, else the content of the file named by
    ``MFCTL_RUN_TOKEN_FILE`` (how ``mfctl run`` passes it: a 0600 file, never a command line),
    else ``""``. Raises OSError when the file cannot be read."""
    env = os.environ if environ is None else environ
    if env.get("MFCTL_RUN_TOKEN"):
        return env["MFCTL_RUN_TOKEN"]
    path = env.get("MFCTL_RUN_TOKEN_FILE")
    if not path:
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


class RuntimeClient:
    def __init__(self, address: str, *, host: str, token: str = "", connect_timeout: float = 10.0):
        h, _, p = address.rpartition(":")
        self.addr = (h.strip("[]"), int(p))
        self.host, self.token, self.connect_timeout = host, token, connect_timeout
        self.conn: Connection | None = None
        self.inbox: queue.Queue[dict] = queue.Queue()
        self.lost = threading.Event()

    @classmethod
    def from_env(cls, environ=None, **kw) -> "RuntimeClient | None":
        """The client for a process started by ``mfctl run`` (SSH or Slurm launch): controller
        from ``MFCTL_CONTROLLER``, host from ``MFCTL_HOST`` (else ``SLURMD_NODENAME``: Slurm
        node names are the inventory's), token from :func:`token_from_env`. One client per host
        by contract (the controller refuses a second ``hello`` for a host): returns None in every
        process but local rank 0 (:func:`local_rank`: torchrun's ``LOCAL_RANK``, else Slurm's
        ``SLURM_LOCALID``); those ranks train without talking to the controller. Raises KeyError
        when ``MFCTL_CONTROLLER`` or the host is missing, ValueError for a malformed local rank."""
        env = os.environ if environ is None else environ
        if local_rank(env) != 0:
            return None
        host = env.get("MFCTL_HOST") or env.get("SLURMD_NODENAME")
        if not host:
            raise KeyError("MFCTL_HOST (or SLURMD_NODENAME)")
        return cls(env["MFCTL_CONTROLLER"], host=host, token=token_from_env(env), **kw)

    def connect(self) -> dict:
        """Connect, say hello, and return the controller's ``welcome``. Raises ControllerLost."""
        try:
            sock = socket.create_connection(self.addr, timeout=self.connect_timeout)
        except OSError as e:
            raise ControllerLost(f"cannot reach controller {self.addr[0]}:{self.addr[1]}: {e}") from e
        self.conn = Connection(sock)  # the hello and the welcome within the connect timeout too
        self._send({"type": "hello", "host": self.host, "token": self.token})
        try:
            msg = self.conn.recv()
        except (OSError, ProtocolError) as e:
            raise ControllerLost(f"no welcome from controller: {e}") from e
        sock.settimeout(None)
        if not msg or msg.get("type") != "welcome":
            why = (msg or {}).get("message") or (msg or {}).get("reason") or "closed without a welcome"
            code = f" ({msg['code']})" if msg and msg.get("code") else ""
            self.close()
            raise HelloRefused(f"controller {self.addr[0]}:{self.addr[1]} refused the hello for {self.host}: "
                               f"{why}{code}", msg)
        threading.Thread(target=self._reader, daemon=True, name="rt-reader").start()
        return msg

    def _reader(self) -> None:
        assert self.conn is not None  # started by connect()
        try:
            while True:
                msg = self.conn.recv()
                if msg is None:
                    break
                self.inbox.put(msg)
        except (OSError, ProtocolError):
            pass
        self.lost.set()

    def _send(self, msg: dict) -> None:
        if self.conn is None:
            raise ControllerLost("not connected to the controller (connect() first)")
        try:
            self.conn.send(msg)
        except OSError as e:
            self.lost.set()
            raise ControllerLost(f"controller connection lost: {e}") from e

    def poll(self, timeout: float = 0.0) -> list[dict]:
        """Control messages received so far (waits up to ``timeout`` s for the first)."""
        out = []
        try:
            out.append(self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait())
            while True:
                out.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        if not out and self.lost.is_set():
            raise ControllerLost("controller connection closed")
        return out

    def traffic(self, iteration: int, matrices: list, **extra) -> None:
        self._send({"type": "traffic", "iteration": iteration, "matrices": matrices, **extra})

    def iteration(self, iteration: int, **metrics) -> None:
        self._send({"type": "iteration", "iteration": iteration, **metrics})

    def paused(self, epoch: int, iteration: int) -> None:
        """OCS-path traffic of the changing circuits is drained (answer to ``propose``)."""
        self._send({"type": "paused", "epoch": epoch, "iteration": iteration})

    def resume(self, epoch: int, iteration: int) -> None:
        """The new routes are in force (answer to ``routes``)."""
        self._send({"type": "resume", "epoch": epoch, "iteration": iteration})

    def error(self, message: str) -> None:
        self._send({"type": "error", "message": message})

    def bye(self, **extra) -> None:
        self._send({"type": "bye", **extra})

    def close(self) -> None:
        if self.conn:
            self.conn.close()
