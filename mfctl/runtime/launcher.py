"""Launch runtime workers on hosts over SSH and stream their output to per-host log files.

Each worker runs in its own SSH session; closing the session hangs the worker up (the
launcher asks for no pty, so on real hosts the command is wrapped by the playbook if it
needs ``setsid``/``timeout``). :meth:`Launcher.stop` closes every session.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from mfctl.transport.ssh import SSHPool, quote_argv

log = logging.getLogger(__name__)


@dataclass
class Worker:
    host: str
    argv: list[str]
    log_path: Path
    channel: paramiko.Channel | None = None
    rc: int | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Launcher:
    def __init__(self, pool: SSHPool, log_dir: Path):
        self.pool = pool
        self.log_dir = log_dir
        self.workers: dict[str, Worker] = {}

    def start(self, host: str, argv: list[str]) -> Worker:
        w = Worker(host, list(argv), self.log_dir / f"{host}.log")
        self.workers[host] = w
        try:
            client = self.pool.client(host)
            chan = client.get_transport().open_session(timeout=self.pool.connect_timeout)
            chan.set_combine_stderr(True)
            chan.exec_command(quote_argv(argv))
            w.channel = chan
        except Exception as e:  # UnreachableError, SSHException, OSError: all mean "not started"
            w.error = f"{host}: launch failed: {e}"
            w.done.set()
            return w
        threading.Thread(target=self._pump, args=(w,), daemon=True, name=f"worker-{host}").start()
        return w

    def _pump(self, w: Worker) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(w.log_path, "ab") as f:
            try:
                while True:
                    data = w.channel.recv(65536)
                    if not data:
                        break
                    f.write(data)
                    f.flush()
                w.rc = w.channel.recv_exit_status()
            except (OSError, EOFError, paramiko.SSHException) as e:
                w.error = str(e)
        w.done.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Hang up every worker's session and wait for the output pumps to finish."""
        for w in self.workers.values():
            if w.channel is not None and not w.done.is_set():
                try:
                    w.channel.close()
                except (OSError, EOFError):
                    pass
        deadline = time.monotonic() + timeout
        for w in self.workers.values():
            w.done.wait(max(0.0, deadline - time.monotonic()))
