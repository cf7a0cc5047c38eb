"""Launch runtime workers on hosts over SSH and stream their output to per-host log files.

Each worker runs in its own SSH session with a pty, so closing the session hangs up the
remote process group (sshd sends SIGHUP), on real hosts as on the mock. :meth:`Launcher.stop`
closes every session.

The run token is never on a command line (``ps``, auditd and error messages would show it):
:meth:`Launcher.start` takes it out of the ``env`` words, writes it to a 0600 file on the host
(:func:`write_token`, the token on the command's stdin) and passes ``MFCTL_RUN_TOKEN_FILE``
instead; :meth:`Launcher.stop` removes the files.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from mfctl.errors import MfctlError, OperationFailed
from mfctl.runtime.render import TOKEN_FILE_ENV, redact, split_token, token_file_command
from mfctl.transport.ssh import SSHPool, quote_argv

log = logging.getLogger(__name__)
MAX_LINE_BYTES = 65536  # of one output line handed to on_line (the log file gets everything)
TOKEN_DIR = ".mfctl"  # the token files' directory on a host, relative to the login directory (mode 0700)
TOKEN_WRITE_TIMEOUT_S = 30.0  # seconds for the token file to be written


def write_token(pool: SSHPool, host: str, directory: str, token: str) -> str:
    """Write ``token`` to a new file with a random name in ``directory`` on ``host`` (mode 0600,
    the token on the command's stdin) and return the file's absolute path. Raises
    UnreachableError / OperationFailed, with the token redacted from the message."""
    name = f"run-{secrets.token_hex(8)}.token"
    try:
        out = pool.run_checked(host, token_file_command(directory, name), stdin=token.encode() + b"\n",
                               timeout=TOKEN_WRITE_TIMEOUT_S)
    except MfctlError as e:
        e.args = (redact(str(e), token),)
        raise
    lines = out.strip().splitlines()
    if not lines or not lines[-1].startswith("/"):
        raise OperationFailed(f"{host}: writing the run token file: expected its directory, got {redact(out, token)[:120]!r}")
    return f"{lines[-1].rstrip('/')}/{name}"


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
        self.token_files: dict[str, str] = {}  # host → the run token's file there

    def start(self, host: str, argv: list[str], *, pty: bool = True, name: str | None = None) -> Worker:
        """Start ``argv`` on ``host``; its output goes to ``<log_dir>/<name>.log`` (``name``:
        the host by default). With ``pty`` (default) closing the session hangs up the remote
        process group (SIGHUP), so a cancelled run leaves nothing behind. An ``env
        MFCTL_RUN_TOKEN=…`` word is replaced by ``MFCTL_RUN_TOKEN_FILE=<a 0600 file>``."""
        argv, token = split_token(list(argv))
        w = Worker(host, argv, self.log_dir / f"{name or host}.log")
        self.workers[name or host] = w
        try:
            if token is not None:
                if host not in self.token_files:
                    self.token_files[host] = write_token(self.pool, host, TOKEN_DIR, token)
                argv = [argv[0], f"{TOKEN_FILE_ENV}={self.token_files[host]}", *argv[1:]]
                w.argv = argv
            client = self.pool.client(host)
            chan = client.get_transport().open_session(timeout=self.pool.connect_timeout)
            chan.set_combine_stderr(True)
            if pty:
                chan.get_pty(term="dumb", width=200)
            chan.exec_command(quote_argv(argv))
            w.channel = chan
        except Exception as e:  # UnreachableError, SSHException, OSError: all mean "not started"
            w.error = redact(f"{host}: launch failed: {e}", token or "")
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
                        if len(partial) > MAX_LINE_BYTES:  # a line without end: shown in pieces, never held whole
                            lines.append(partial[:MAX_LINE_BYTES])
                            partial = partial[MAX_LINE_BYTES:]
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
        remove_token_files(self.pool, self.token_files)
        self.token_files = {}


def remove_token_files(pool: SSHPool, files: dict[str, str], timeout: float = 10.0) -> None:
    """Best effort: ``rm -f`` each host's token file (the token is worthless once the run's
    controller is closed; an unreachable host keeps its 0600 file)."""
    if files:
        for r in pool.run_many(list(files), lambda h: ["rm", "-f", files[h]], timeout=timeout):
            if not r.ok:
                log.warning("%s: could not remove the run token file %s: %s", r.host, files[r.host],
                            r.error or r.stderr.strip()[:200])
