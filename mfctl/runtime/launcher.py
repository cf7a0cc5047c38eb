"""Launch runtime workers on hosts over SSH and stream their output to per-host log files.

:class:`Launcher` is what the job sees of a launcher: ``start(controller, token)``,
``wait_running()``, ``stop(grace_s)``, ``workers`` (host → :class:`Worker`) and ``job_id``.
Two implement it: :class:`SSHLauncher` (each host's command over SSH: the simulated runtime,
or torchrun) and :class:`mfctl.runtime.slurm.SlurmLaunch` (one batch job); :func:`launcher_for`
picks one by the playbook's ``runtime.launcher``. A new launcher implements the protocol and
gets a line in :func:`launcher_for`.

Each worker runs in its own SSH session with a pty (:class:`SessionLauncher`), so closing the
session hangs up the remote process group (sshd sends SIGHUP), on real hosts as on the mock.
:meth:`SessionLauncher.stop` closes every session; the runtime's launcher first types Ctrl-C at
each command still running (its pty sends it SIGINT, as an operator's terminal would) and waits,
bounded, for the command's exit status: a session once closed says nothing more, so a command
hung up at once was still ending (torchrun stopping its ranks) when ``mfctl run`` returned.

The run token is never on a command line (``ps``, auditd and error messages would show it):
:meth:`SessionLauncher.start` takes it out of the ``env`` words, writes it to a 0600 file on the
host (:func:`write_token`, the token on the command's stdin) and passes ``MFCTL_RUN_TOKEN_FILE``
instead; :meth:`SessionLauncher.stop` removes the files.
"""

from __future__ import annotations

import logging
import re
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import paramiko

from mfctl.errors import MfctlError, OperationFailed, UnreachableError
from mfctl.runtime.render import TOKEN_FILE_ENV, redact, render_hosts, split_token, token_file_command
from mfctl.transport.ssh import SSHPool, quote_argv

if TYPE_CHECKING:
    from mfctl.observer import Observer
    from mfctl.runtime.playbook import Playbook

log = logging.getLogger(__name__)
MAX_LINE_BYTES = 65536  # of one output line handed to on_line (the log file gets everything)
TOKEN_DIR = ".mfctl"  # the token files' directory on a host, relative to the login directory (mode 0700)
TOKEN_WRITE_TIMEOUT_S = 30.0  # seconds for the token file to be written
#: seconds a torchrun whose ranks ended well is given to exit by itself (its agents' exit barrier:
#: ~0.3 s on an idle machine, over 3 s measured with 4 agents on a loaded 2-core one); the wait
#: ends as soon as every host's torchrun has
TORCHRUN_EXIT_GRACE_S = 10.0
MAX_NOTES = 8  # a worker's notes kept (the first is the one its error names)
#: seconds a command still running at the run's end is given to end after its Ctrl-C (torchrun stops its
#: ranks and exits: 0.5-2 s measured with the torch job on a loaded 2-core machine) before its session is
#: hung up; the wait ends as soon as every such command has ended
INTERRUPT_GRACE_S = 10.0


#: torchrun's own lines that say why it ended (torch 2.13's ``torch.distributed.run``, checked by running it):
#: a worker failed (its agent then SIGTERMs the others and exits 1) ...
TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\) of binary: (\S+)")
#: ... the agent got SIGTERM/SIGINT/SIGHUP/SIGQUIT (it passes it to every worker, then exits 1) ...
TORCHRUN_SIGNAL = re.compile(r"SignalException: Process (\d+) got signal: (\d+)")
#: ... or an error of its own, e.g. the rendezvous host unreachable: ``torch.distributed.DistNetworkError:
#: The client socket has timed out after 20000ms while trying to connect to (ADDR, PORT).`` (exit 1)
TORCHRUN_ERROR = re.compile(r"^(torch\.distributed\.[\w.]*?(\w+(?:Error|Exception))): (\S.*)$")


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def torchrun_note(line: str) -> str | None:
    """What one line of torchrun's output says about how it ended, or None: ``local rank 0 (pid
    123) of mfctl-simrt failed with exit code 17`` (or ``was killed by SIGKILL``), ``torchrun got
    SIGHUP``, ``rendezvous failed: DistNetworkError: …`` / ``DistStoreError: …``."""
    if m := TORCHRUN_FAILED.search(line):
        rc, lr, pid, binary = int(m[1]), m[2], m[3], m[4]
        how = f"failed with exit code {rc}" if rc >= 0 else f"was killed by {_signame(-rc)}"
        return f"local rank {lr} (pid {pid}) of {binary} {how}"
    if m := TORCHRUN_SIGNAL.search(line):
        return f"torchrun got {_signame(int(m[2]))}"
    if (m := TORCHRUN_ERROR.match(line.strip())) and "ChildFailedError" not in m[2]:
        kind = "rendezvous failed: " if m[2].startswith(("DistNetwork", "DistStore", "Rendezvous")) else ""
        return f"{kind}{m[2]}: {m[3][:300]}"
    return None


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
    notes: list[str] = field(default_factory=list)  # what the command's own output said about its end (torchrun's)


class Launcher(Protocol):
    """A way to start the runtime on the hosts, follow it and stop it (see the module docstring)."""

    @property
    def workers(self) -> dict[str, Worker]:
        """Host → its worker (``done`` set when it ended, with ``rc``/``error``)."""

    @property
    def job_id(self) -> int | None:
        """The scheduler's job id (Slurm), or None."""

    def start(self, controller: str, token: str) -> None:
        """Start the runtime on every host, told to reach ``controller`` (``host:port``) with the
        run ``token``. Raises UnreachableError / OperationFailed (the token redacted)."""

    def wait_running(self) -> None:
        """Block until the runtime runs (a batch job left the queue). Raises OperationFailed."""

    def stop(self, grace_s: float) -> None:
        """Let the runtime end by itself for ``grace_s`` s (0: the run failed, at once), then end
        it; remove the token files."""


class SessionLauncher:
    """One SSH session per worker, its output pumped to ``<log_dir>/<name>.log`` and ``on_line``."""

    def __init__(self, pool: SSHPool, log_dir: Path, on_line=None, diagnose=None):
        """``diagnose(line) -> str | None``: reads each output line for what it says about the
        command's end (:func:`torchrun_note`); a command that exits non-zero has the first such
        note as its ``error`` (``torchrun exited 1: local rank 0 … failed with exit code 17``)."""
        self.pool = pool
        self.log_dir = log_dir
        self.on_line = on_line  # (host, line) -> None: a merged live view
        self.diagnose = diagnose
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
        threading.Thread(target=self._pump, args=(w, chan), daemon=True, name=f"worker-{host}").start()
        return w

    def _pump(self, w: Worker, chan: paramiko.Channel) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        partial = b""
        with open(w.log_path, "ab") as f:
            try:
                while True:
                    data = chan.recv(65536)
                    if not data:
                        break
                    w.last_data = time.monotonic()
                    data = data.replace(b"\r\n", b"\n")  # a pty turns \n into \r\n
                    f.write(data)
                    f.flush()
                    if self.on_line or self.diagnose:
                        partial += data
                        *lines, partial = partial.split(b"\n")
                        if len(partial) > MAX_LINE_BYTES:  # a line without end: shown in pieces, never held whole
                            lines.append(partial[:MAX_LINE_BYTES])
                            partial = partial[MAX_LINE_BYTES:]
                        for ln in lines:
                            self._line(w, ln.decode(errors="replace"))
                if partial:
                    self._line(w, partial.decode(errors="replace"))
                w.rc = chan.recv_exit_status()
                if w.rc and w.notes and w.error is None:
                    how = "ended without an exit status (hung up)" if w.rc == -1 else f"exited {w.rc}"
                    w.error = f"{_command_name(w.argv)} {how}: {w.notes[0]}"
            except (OSError, EOFError, paramiko.SSHException) as e:
                w.error = str(e)
        w.done.set()

    def _line(self, w: Worker, line: str) -> None:
        if self.diagnose and len(w.notes) < MAX_NOTES and (note := self.diagnose(line)):
            w.notes.append(note)
        if self.on_line:
            self.on_line(w.host, line)

    def stop(self, timeout: float = 5.0, interrupt_s: float = 0.0) -> None:
        """Hang up every worker's session and wait for the output pumps to finish. With
        ``interrupt_s`` > 0, each command still running on a pty first gets a Ctrl-C and up to
        ``interrupt_s`` s (all together) to end, its exit status read; those still running then are
        hung up and their ``error`` says so (nothing confirms their end after that)."""
        if interrupt_s > 0:
            running = [w for w in self.workers.values() if w.channel is not None and not w.done.is_set()]
            for w in running:
                chan = w.channel
                assert chan is not None
                try:
                    chan.sendall(b"\x03")  # the pty's VINTR: SIGINT to the command, as at a terminal
                except (OSError, EOFError, paramiko.SSHException):
                    pass
            deadline = time.monotonic() + interrupt_s
            for w in running:
                w.done.wait(max(0.0, deadline - time.monotonic()))
            for w in running:
                if not w.done.is_set():
                    log.warning("%s: %s still running %g s after Ctrl-C: hung up", w.host, _command_name(w.argv),
                                interrupt_s)
                    w.error = w.error or (f"{_command_name(w.argv)} still running {interrupt_s:g} s after Ctrl-C: "
                                          f"hung up, its end not seen")
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


def _command_name(argv: list[str]) -> str:
    """The command of ``[env VAR=value …] command args`` (``torchrun``)."""
    words = argv[1:] if argv[:1] == ["env"] else argv
    return next((w for w in words if "=" not in w or w.startswith("=")), argv[0] if argv else "?")


class SSHLauncher:
    """Each host's command (``runtime.launcher: sim`` — the simulated runtime — or ``ssh`` —
    torchrun) in an SSH session of its own (:class:`SessionLauncher`); each launch journalled as
    ``runtime.launch`` with the token redacted. A torchrun that fails says why in its output
    (:func:`torchrun_note`); the worker's ``error`` names it (``torchrun exited 1: local rank 0
    (pid 4810) of mfctl-simrt failed with exit code 17``, ``torchrun exited 1: torchrun got
    SIGHUP``, ``torchrun exited 1: rendezvous failed: DistNetworkError: …``)."""

    job_id: int | None = None

    def __init__(self, pb: "Playbook", inv, pool: SSHPool, log_dir: Path, *, journal, on_line=None):
        self.pb, self.inv, self.journal = pb, inv, journal
        diagnose = torchrun_note if pb.runtime.launcher == "ssh" else None
        self.sessions = SessionLauncher(pool, log_dir, on_line=on_line, diagnose=diagnose)

    @property
    def workers(self) -> dict[str, Worker]:
        return self.sessions.workers

    def start(self, controller: str, token: str) -> None:
        for hl in render_hosts(self.pb, self.inv, controller, token):
            self.journal.append("runtime.launch", host=hl.host, command=hl.command_line(redact=True))
            w = self.sessions.start(hl.host, hl.full_argv())
            if w.error:
                raise UnreachableError(w.error)

    def wait_running(self) -> None:
        pass  # a session runs its command at once

    def stop(self, grace_s: float = 0.0) -> None:
        """Wait up to ``grace_s`` for every host's command to end by itself, then Ctrl-C the rest
        and wait for their end (:data:`INTERRUPT_GRACE_S` at most, then they are hung up): the run
        returns once what it started has ended, not while torchrun still stops its ranks. torchrun
        ends a few tenths of a second after its ranks (its agents' exit barrier), so a torchrun
        launch gets at least :data:`TORCHRUN_EXIT_GRACE_S` when ``grace_s`` > 0: stopped before, it
        reported a signal and no clean exit for a run that went well."""
        if grace_s > 0 and self.pb.runtime.launcher == "ssh":
            grace_s = max(grace_s, TORCHRUN_EXIT_GRACE_S)
        deadline = time.monotonic() + grace_s
        for w in self.workers.values():
            w.done.wait(max(0.0, deadline - time.monotonic()))
        self.sessions.stop(interrupt_s=INTERRUPT_GRACE_S)


def launcher_for(pb: "Playbook", inv, pool: SSHPool, run_dir: Path, run_id: str, *, journal,
                 observer: "Observer", on_line=None) -> Launcher:
    """The launcher the playbook names (``runtime.launcher``), logs in ``<run_dir>/logs``."""
    if pb.runtime.launcher == "slurm":
        from mfctl.runtime.slurm import SlurmLaunch

        return SlurmLaunch.for_run(pb, inv, pool, run_dir, run_id, journal=journal, observer=observer, on_line=on_line)
    return SSHLauncher(pb, inv, pool, run_dir / "logs", journal=journal, on_line=on_line)


def remove_token_files(pool: SSHPool, files: dict[str, str], timeout: float = 10.0) -> None:
    """Best effort: ``rm -f`` each host's token file (the token is worthless once the run's
    controller is closed; an unreachable host keeps its 0600 file)."""
    if files:
        for r in pool.run_many(list(files), lambda h: ["rm", "-f", files[h]], timeout=timeout):
            if not r.ok:
                log.warning("%s: could not remove the run token file %s: %s", r.host, files[r.host],
                            r.error or r.stderr.strip()[:200])
