"""Launch runtime workers on hosts over SSH and stream their output to per-host log files.

Each worker runs in its own SSH session with a pty, so closing the session hangs up the
remote process group (sshd sends SIGHUP), on real hosts as on the mock. :meth:`Launcher.stop`
closes every session.
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
    last_data: float = 0.0  # time.monotonic() of the last output received


class Launcher:
    def __init__(self, pool: SSHPool, log_dir: Path, on_line=None):
        self.pool = pool
        self.log_dir = log_dir
        self.on_line = on_line  # (host, line) -> None: a merged live view
        self.workers: dict[str, Worker] = {}

    def start(self, host: str, argv: list[str], *, pty: bool = True, name: str | None = None) -> Worker:
        """Start ``argv`` on ``host``; its output goes to ``<log_dir>/<name>.log`` (``name``:
        the host by default). With ``pty`` (default) closing the session hangs up the remote
        process group (SIGHUP), so a cancelled run leaves nothing behind."""
        w = Worker(host, list(argv), self.log_dir / f"{name or host}.log")
        self.workers[name or host] = w
        try:
            client = self.pool.client(host)
            chan = client.get_transport().open_session(timeout=self.pool.connect_timeout)
            chan.set_combine_stderr(True)
            if pty:
                chan.get_pty(term="dumb", width=200)
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
        partial = b""
        with open(w.log_path, "ab") as f:
            try:
                while True:
                    data = w.channel.recv(65536)
                    if not data:
                        break
                    w.last_data = time.monotonic()
                    data = data.replace(b"\r\n", b"\n")  # a pty turns \n into \r\n
                    f.write(data)
                    f.flush()
                    if self.on_line:
                        partial += data
                        *lines, partial = partial.split(b"\n")
                        for ln in lines:
                            self.on_line(w.host, ln.decode(errors="replace"))
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
