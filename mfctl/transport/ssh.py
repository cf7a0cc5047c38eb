"""SSH to hosts and devices: strict host keys, timeouts, pooling, fan-out (paramiko for
interactive sessions, libssh2 for commands: :class:`SSHPool`).

Host keys are checked against the inventory's ``known_hosts`` file by one policy for both stacks,
with OpenSSH's rules (:mod:`mfctl.transport.hostkeys`): both stacks ask first for the key types the
host is known by; ``strict`` by default (unknown host → :class:`UnreachableError`); ``accept-new``
records a key seen for the first time (like OpenSSH's ``StrictHostKeyChecking=accept-new``); under
both, a key the file does not hold for a known host — of any type — is CHANGED, a ``@revoked`` key
is refused, a host vouched for only by ``@cert-authority`` is refused (no host certificates).
Authentication: a key file or the SSH agent, or a password passed in by the caller from the
environment — never from an inventory. Failures name host, address:port and what happened, in
the same words on both stacks (:mod:`mfctl.transport.libssh2`).
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, TypeVar

from mfctl.errors import ExitCode, SSHKeyError, UnreachableError

if TYPE_CHECKING:
    import paramiko

    from mfctl.observer import Observer
    from mfctl.transport.results import Results

T = TypeVar("T")

log = logging.getLogger(__name__)

# paramiko is imported where it is used: ``mfctl exec`` and the health sweep run commands over
# libssh2 only and do not pay paramiko's import (~0.1 s of every cold start).


@dataclass
class SSHTarget:
    """Where and how to log in. ``name`` is the inventory name used in results."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    agent: bool = True
    password: str | None = field(default=None, repr=False)  # only ever from the environment / a secret file; never in a repr
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: str = "strict"


_PARAMIKO_LOG = "mfctl.transport.paramiko"  # paramiko's transport logs here: its warnings and errors, not its chatter
logging.getLogger(_PARAMIKO_LOG).setLevel(logging.WARNING)
# its errors are the UnreachableError connect() raises: without a handler of the caller's they are
# not printed (Python's last-resort handler would put a traceback per failed connection on stderr)
logging.getLogger(_PARAMIKO_LOG).addHandler(logging.NullHandler())


class _IntoMfctlLog(logging.Handler):
    """What paramiko logs under its own loggers (``paramiko.*``: a transport before
    ``set_log_channel``, a host vanishing under a session — ``Socket exception: Connection reset by
    peer``, ``Error reading SSH protocol banner`` with its traceback) goes where
    :data:`_PARAMIKO_LOG`'s records go: mfctl's log file, never the terminal. What failed reaches
    the operator once, as the UnreachableError of the call that met it."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(_PARAMIKO_LOG).handle(record)


_paramiko_root = logging.getLogger("paramiko")
if not any(isinstance(h, _IntoMfctlLog) for h in _paramiko_root.handlers):
    _paramiko_root.addHandler(_IntoMfctlLog())
    _paramiko_root.propagate = False  # (not to the root logger either: a caller's stderr handler there)
    if _paramiko_root.level == logging.NOTSET:
        _paramiko_root.setLevel(logging.WARNING)

_PKEY_CACHE: dict[str, "paramiko.PKey"] = {}
_PKEY_LOCK = threading.Lock()


def _private_key(path: str, host: str) -> paramiko.PKey:
    """Load a private key file once per process (any type paramiko knows). Encrypted keys
    belong in the SSH agent: mfctl never asks for a passphrase (the same words as on the command
    path: :func:`~mfctl.transport.libssh2.key_file_problem`)."""
    import paramiko

    from mfctl.transport.libssh2 import key_file_problem

    p = str(Path(path).expanduser())
    with _PKEY_LOCK:
        if p not in _PKEY_CACHE:
            problem = key_file_problem(p)
            if problem:
                raise SSHKeyError(f"{host}: {problem}")
            try:
                _PKEY_CACHE[p] = paramiko.PKey.from_path(p)
            except TypeError as e:  # cryptography: "Key is password-protected, but password was not provided."
                raise SSHKeyError(f"{host}: SSH key {p} is protected by a passphrase, and mfctl never asks for "
                                       "one: load it into the SSH agent and remove key_file") from e
            except (OSError, paramiko.SSHException, ValueError) as e:
                raise SSHKeyError(f"{host}: cannot load SSH key {p}: {e}") from e
        return _PKEY_CACHE[p]


def connect(target: SSHTarget, timeout: float) -> paramiko.SSHClient:
    """Open an authenticated SSH connection. Raises UnreachableError (exit 4) naming the host, its
    address:port and what happened, in the command path's words (:mod:`mfctl.transport.libssh2`).
    The host-key algorithms of the key types known_hosts lists for the host are asked for first,
    and the key is judged by :class:`~mfctl.transport.hostkeys.HostKeyPolicy`, as on the command path."""
    import paramiko

    from mfctl.transport.hostkeys import HostKeyPolicy, algorithm_preference

    policy = HostKeyPolicy.of(target)
    client = paramiko.SSHClient()  # knows no key itself (never loads a known_hosts): every key goes to the policy
    client.set_missing_host_key_policy(_judge(policy, target))
    # read (and refused when unreadable) before any socket is opened
    known = policy.known_types(target.address, target.port, host=target.name)
    pkey = _private_key(target.key_file, target.name) if target.key_file else None
    made: list[paramiko.Transport] = []

    def transport(sock, **kw) -> paramiko.Transport:
        t = paramiko.Transport(sock, **kw)
        t.set_log_channel(_PARAMIKO_LOG)  # into mfctl's log file, not onto the terminal (a traceback per failure)
        opts = t.get_security_options()
        opts.key_types = algorithm_preference(opts.key_types, known)
        made.append(t)
        return t

    where = f"{target.address}:{target.port}"
    try:
        sock = socket.create_connection((target.address, target.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (socket.timeout, TimeoutError) as e:
        raise UnreachableError(f"{target.name}: connect to {where} timed out after {timeout:g} s") from e
    except OSError as e:
        raise UnreachableError(f"{target.name}: cannot connect to {where}: {e.strerror or e}") from e
    try:
        client.connect(
            target.address,
            sock=sock,
            port=target.port,
            username=target.user,
            pkey=pkey,
            password=target.password,
            allow_agent=target.agent and not target.password,
            look_for_keys=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            transport_factory=transport,
        )
    except UnreachableError:  # the host key policy's verdict
        client.close()
        raise
    except (paramiko.SSHException, EOFError, OSError) as e:
        in_kex = not made or made[0].host_key is None
        client.close()
        raise UnreachableError(f"{target.name}: SSH to {where} "
                               f"{_paramiko_failure(e, target, in_kex, timeout)}") from e
    return client


def _paramiko_failure(e: BaseException, target: SSHTarget, in_kex: bool, timeout: float) -> str:
    """What a paramiko connect failure means, after ``SSH to ADDRESS:PORT`` (libssh2's words)."""
    import paramiko

    from mfctl.transport import libssh2 as L

    text, cause = str(e), e.__context__
    if isinstance(e, (socket.timeout, TimeoutError)) or isinstance(cause, (socket.timeout, TimeoutError)):
        return f"timed out after {timeout:g} s ({'in the key exchange' if in_kex else 'authenticating'})"
    if isinstance(e, paramiko.BadAuthenticationType):
        return f"failed: the server does not take a key for {target.user} (it allows only: {', '.join(e.allowed_types)})"
    if isinstance(e, paramiko.AuthenticationException):
        return f"failed: {L.auth_refused(target)}"
    if text == "No authentication methods available":
        return f"failed: {L.no_agent(target)}"
    if text.startswith("Error reading SSH protocol banner") or text.startswith("Indecipherable protocol version"):
        return f"failed: {L.CLOSED_BEFORE_BANNER}"
    if text.startswith(("Incompatible ssh", "Incompatible version")):
        return f"failed: {L.NO_COMMON_ALGORITHM} ({text})"
    if isinstance(e, (EOFError, ConnectionError)) or text in ("No existing session", "SSH session not active"):
        return f"failed: {L.CLOSED_IN_KEX if in_kex else 'the server closed the connection while mfctl authenticated'}"
    return f"failed: {text or type(e).__name__}"


def _judge(policy, target: SSHTarget):
    """paramiko's hook after the key exchange (called for every key: the client knows none),
    handing the key to ``policy``."""
    import paramiko

    class Judge(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):  # noqa: D401 - paramiko API
            policy.check(target.name, target.address, target.port, key.get_name(), key.asbytes())

    return Judge()


@dataclass
class CommandResult:
    """Per-host result of a command: data, never printed by the service (DESIGN §3)."""

    host: str
    argv: list[str]
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # unreachable / timeout / SSH failure, without the host name (it is .host)
    error_code: int | None = None  # the exit code of ``error`` when not UNREACHABLE (an unusable key: CONFIG)
    elapsed_s: float = 0.0
    endpoint: str = ""  # the sshd it went to, address:port
    stdout_dropped: int = 0  # bytes the command wrote beyond the cap (max_output_bytes), read and not kept
    stderr_dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0

    def checked(self, cap: int | None = None) -> str:
        """Its stdout; or UnreachableError (no connection, timeout) or OperationFailed (non-zero
        exit, or a stdout longer than the output cap: a part of it is no answer to parse) naming
        the host, the command and stderr."""
        from mfctl.errors import OperationFailed

        cmd = " ".join(map(str, self.argv))
        if self.error:
            raise UnreachableError(f"{self.host}: {cmd}: {self.error}")
        if self.rc != 0:
            raise OperationFailed(f"{self.host}: {cmd}: exit {self.rc}: {(self.stderr or self.stdout).strip()[:300]}")
        if self.stdout_dropped:
            limit = f"{cap} bytes" if cap else "the cap"  # cap: the pool's max_output_bytes
            raise OperationFailed(f"{self.host}: {cmd}: output longer than {limit} ({self.stdout_dropped} more bytes "
                                  "dropped; MFCTL_MAX_OUTPUT_BYTES)")
        return self.stdout

    @property
    def exit_code(self):
        """This host's outcome (DESIGN §9): UNREACHABLE (4) when it could not be reached or the
        command timed out or was abandoned (CONFIG (3) when the inventory's SSH key cannot be
        used), FAILED (1) for a non-zero exit, else OK."""
        from mfctl.errors import ExitCode

        if self.error:
            return ExitCode(self.error_code) if self.error_code is not None else ExitCode.UNREACHABLE
        return (ExitCode.FAILED if self.rc != 0 else ExitCode.OK)

    @property
    def truncated(self) -> bool:
        """Whether stdout or stderr is only the first ``max_output_bytes`` of what the command wrote."""
        return bool(self.stdout_dropped or self.stderr_dropped)

    @property
    def error_shared(self) -> str | None:
        """:attr:`error` as hosts that failed the same way share it (:func:`without_endpoint`);
        :attr:`endpoint` keeps the address."""
        return without_endpoint(self.error, self.endpoint) if self.error else self.error

    def to_dict(self) -> dict:
        return {"host": self.host, "argv": self.argv, "rc": self.rc, "ok": self.ok, "stdout": self.stdout,
                "stderr": self.stderr, "error": self.error, "elapsed_s": round(self.elapsed_s, 4),
                "endpoint": self.endpoint or None, "truncated": self.truncated,
                "stdout_dropped_bytes": self.stdout_dropped, "stderr_dropped_bytes": self.stderr_dropped}


def without_endpoint(text: str, endpoint: str | None) -> str:
    """``text`` with a host's own ``address:port`` (also ``[address]:port``, as known_hosts writes
    it) read as ``<address>:<port>``, so that hosts that failed the same way fold into one line
    (``gpu[001-120]: cannot connect to <address>:<port>: Connection refused``)."""
    if not endpoint:
        return text
    addr, _, port = endpoint.rpartition(":")
    return text.replace(f"[{addr}]:{port}", "<address>:<port>").replace(endpoint, "<address>:<port>")


def quote_argv(argv: Sequence[str]) -> str:
    """Join argv for the remote shell, every word quoted with :func:`shlex.quote`."""
    return " ".join(shlex.quote(str(a)) for a in argv)


class SSHPool:
    """One reusable, authenticated connection per host; thread-safe; bounded fan-out.

    Commands (:meth:`run`, :meth:`run_many`, :meth:`run_checked`) go over libssh2 sessions
    (:mod:`mfctl.transport.libssh2`: C handshakes, the fan-out path); :meth:`client` gives a
    paramiko connection for interactive and streaming sessions (a pty, ``tail -F``, a CLI).
    Both check host keys the same way."""

    def __init__(self, targets: Iterable[SSHTarget], *, connect_timeout: float = 10.0,
                 command_timeout: float = 30.0, fanout: int = 32, max_output_bytes: int | None = None):
        from mfctl import settings

        self.targets = {t.name: t for t in targets}
        #: bytes of each stream kept per command (the rest is drained and counted: CommandResult.truncated)
        self.max_output_bytes = max_output_bytes if max_output_bytes is not None else settings.get_int("max_output_bytes")
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.fanout = max(1, fanout)
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._exec: dict = {}  # host → libssh2.ExecSession
        self._locks: dict[str, threading.Lock] = {n: threading.Lock() for n in self.targets}
        self._exec_locks: dict[str, threading.Lock] = {n: threading.Lock() for n in self.targets}
        self._failed: dict[str, UnreachableError] = {}  # a connection that failed ahead (start_many)

    def client(self, host: str) -> paramiko.SSHClient:
        with self._locks[host]:
            c = self._clients.get(host)
            if c is not None and c.get_transport() is not None and c.get_transport().is_active():
                return c
            c = connect(self.targets[host], self.connect_timeout)
            self._clients[host] = c
            return c

    def run(self, host: str, argv: Sequence[str], *, timeout: float | None = None,
            stdin: bytes | None = None, abort: threading.Event | None = None) -> CommandResult:
        """Run argv on one host; ``stdin`` (bytes) is sent and then closed (EOF). Once ``abort`` is
        set, the command is not started (if the connection was still being made) or is abandoned
        (error ``interrupted``). Never raises for remote failures: they are in the result."""
        from ssh2.exceptions import SSH2Error

        from mfctl.transport.libssh2 import CommandAborted, CommandTimeout, SessionGone, command_failure

        t0 = time.monotonic()
        t = self.targets[host]
        res = CommandResult(host=host, argv=[str(a) for a in argv], endpoint=f"{t.address}:{t.port}")
        timeout = timeout or self.command_timeout
        try:
            try:
                done = self._exec_session(host).run(quote_argv(argv), timeout, stdin, abort, self.max_output_bytes)
            except SessionGone as e:
                self._drop_exec(host)
                if not e.reused:
                    raise
                # a pooled session the server dropped while idle: the command was not sent, so it is
                # sent once more on a new session (a second SessionGone is the host's error)
                log.info("%s: the server had closed the pooled SSH session to %s; connecting again", host, res.endpoint)
                done = self._exec_session(host).run(quote_argv(argv), timeout, stdin, abort, self.max_output_bytes)
            rc, out, err, res.stdout_dropped, res.stderr_dropped = done
            res.rc, res.stdout, res.stderr = rc, out.decode(errors="replace"), err.decode(errors="replace")
            if res.truncated:
                log.warning("%s: %s: output truncated at %d bytes per stream (%d + %d bytes dropped)", host,
                            res.argv[0] if res.argv else "", self.max_output_bytes, res.stdout_dropped, res.stderr_dropped)
        except UnreachableError as e:  # its message starts with the host, which the result carries already
            res.error = str(e).removeprefix(f"{host}: ")
            res.error_code = None if e.exit_code == ExitCode.UNREACHABLE else int(e.exit_code)
        except CommandTimeout:
            res.error = f"timeout: command did not finish within {timeout:g} s"
            self._drop_exec(host)  # the session may hold the abandoned channel's data
        except CommandAborted:
            res.error = "interrupted: the command was abandoned"
            self._drop_exec(host)
        except SessionGone as e:
            res.error = f"SSH error: {res.endpoint}: {e}"
            self._drop_exec(host)
        except (SSH2Error, OSError) as e:
            res.error = command_failure(e, res.endpoint)
            self._drop_exec(host)
        res.elapsed_s = time.monotonic() - t0
        return res

    def run_checked(self, host: str, argv: Sequence[str], *, timeout: float | None = None,
                    stdin: bytes | None = None) -> str:
        """Run argv and return its stdout; raise UnreachableError (no connection, timeout) or
        OperationFailed (non-zero exit, or a stdout longer than ``max_output_bytes``: a part of it is
        no answer to parse) naming the host, the command and stderr (:meth:`CommandResult.checked`)."""
        return self.run(host, argv, timeout=timeout, stdin=stdin).checked(self.max_output_bytes)

    def run_many(self, hosts: Sequence[str], argv_for: Callable[[str], Sequence[str]], *,
                 timeout: float | None = None, on_done: Callable[[CommandResult], None] | None = None,
                 close: bool = False) -> list[CommandResult]:
        """Run a command on many hosts in parallel (at most ``fanout`` at once), in host order.
        ``close``: end each host's session as soon as its command is done (one-shot callers such
        as ``mfctl exec``: the goodbyes then overlap the other hosts' work instead of following it)."""
        return self.start_many(hosts, close=close).run(argv_for, timeout=timeout, on_done=on_done)

    def map(self, hosts: Sequence[str], fn: Callable[[str], T], *, observer: "Observer | None" = None,
            phase: str | None = None) -> "Results[T]":
        """Call ``fn(host)`` for every host, at most ``fanout`` at once, and return their
        :class:`~mfctl.transport.results.Results` in host order.

        ``fn`` may run any number of commands on its host (``self.run``…) and returns anything; a
        value with an ``exit_code`` (a CommandResult) gives its host's outcome. ``fn`` raising an
        :class:`~mfctl.errors.MfctlError` is that host's outcome (UnreachableError → unreachable,
        with its message as the error); any other exception is a bug and is raised here, after the
        hosts under way have finished (no new host starts). ``observer`` hears ``phase`` (with the
        number of hosts), then ``host_started``/``host_done`` per host, from the worker threads.
        Ctrl-C: no host that has not begun is started and KeyboardInterrupt is raised at once; the
        workers are daemon threads, so a process that exits then does not wait for the hosts under way."""
        from mfctl.errors import MfctlError
        from mfctl.observer import NullObserver
        from mfctl.transport.results import HostResult, Results, outcome_of

        obs = observer or NullObserver()
        if phase is not None:
            obs.phase(phase, total=len(hosts))
        out: list = [None] * len(hosts)

        def one(i: int) -> None:
            host = hosts[i]
            obs.host_started(host)
            try:
                v = fn(host)
                r = HostResult(host, v, getattr(v, "error", None), outcome_of(v))
            except UnreachableError as e:
                r = HostResult(host, error=str(e).removeprefix(f"{host}: "), exit_code=e.exit_code)
            except MfctlError as e:
                r = HostResult(host, error=str(e).removeprefix(f"{host}: "), exit_code=e.exit_code)
            obs.host_done(host, r)
            out[i] = r

        workers = Workers(len(hosts), self.fanout, one, "mfctl-map")
        try:
            workers.join()
        except BaseException:  # Ctrl-C: no host that has not begun starts
            workers.stop.set()
            raise
        workers.raise_first()
        return Results(out)

    def start_many(self, hosts: Sequence[str], *, close: bool = False) -> "Batch":
        """Begin a :meth:`run_many` before its command is known: up to ``fanout`` hosts are
        connected (TCP, SSH handshake, host key check, authentication) while the caller is still
        working out what to run; :meth:`Batch.run` then runs it, :meth:`Batch.cancel` gives up.
        No command is sent before :meth:`Batch.run`. A connection that fails ahead is reported
        by the host's result (it is not tried twice)."""
        return Batch(self, hosts, close=close)

    def _exec_session(self, host: str):
        from mfctl.transport.libssh2 import ExecSession

        with self._exec_locks[host]:
            failed = self._failed.pop(host, None)
            if failed is not None:
                raise failed
            s = self._exec.get(host)
            if s is None:
                s = self._exec[host] = ExecSession(self.targets[host], self.connect_timeout)
            return s

    def _connect_ahead(self, host: str) -> None:
        """Open ``host``'s session now; a failure is kept for the host's next command."""
        try:
            self._exec_session(host)
        except UnreachableError as e:
            with self._exec_locks[host]:
                self._failed[host] = e

    def _forget(self, host: str) -> None:
        """Close ``host``'s command session and drop a connection failure kept for it."""
        self._drop_exec(host)
        self._failed.pop(host, None)

    def _drop_exec(self, host: str) -> None:
        s = self._exec.pop(host, None)
        if s is not None:
            s.close()

    def drop(self, host: str) -> None:
        c = self._clients.pop(host, None)
        if c is not None:
            c.close()
        self._drop_exec(host)

    def close(self) -> None:
        deadline = time.monotonic() + 2.0  # for all the commands still under way together, not each
        for h in set(self._clients) | set(self._exec):
            c = self._clients.pop(h, None)
            if c is not None:
                c.close()
            s = self._exec.pop(h, None)
            if s is not None:
                s.close(wait_s=deadline - time.monotonic())
        self._failed.clear()

    def __enter__(self) -> "SSHPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Workers:
    """The one fan-out engine of :meth:`SSHPool.map` and :class:`Batch`: ``min(fanout, n)`` daemon
    threads calling ``job(i)`` for ``i`` in 0…n-1, in order, each taking the next index when done.
    The first exception a job raises sets :attr:`stop` (no job starts after it) and is kept for
    :meth:`raise_first`; setting :attr:`stop` from outside (Ctrl-C) does the same. Daemon threads: a
    process that exits does not wait for a job under way."""

    def __init__(self, n: int, fanout: int, job: Callable[[int], None], name: str):
        self.n, self.job = n, job
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._next = 0
        self.threads = [threading.Thread(target=self._work, daemon=True, name=f"{name}-{k}")
                        for k in range(min(max(1, fanout), n))]
        for t in self.threads:
            t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self.stop.is_set() or self._next >= self.n:
                    return
                i, self._next = self._next, self._next + 1
            try:
                self.job(i)
            except BaseException as e:  # noqa: BLE001 - a caller's or a bug's: stop the others, raised by raise_first
                with self._lock:
                    self.errors.append(e)
                self.stop.set()
                return

    def join(self, within_s: float | None = None) -> None:
        """Wait for every thread; with ``within_s``, for all of them together at most that long (s)."""
        deadline = None if within_s is None else time.monotonic() + within_s
        for t in self.threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def raise_first(self) -> None:
        if self.errors:
            raise self.errors[0]


_LATE = object()  # a Batch worker gave up waiting for its command: the host is run afresh


class Batch:
    """A :meth:`SSHPool.run_many` started before its command is known (:meth:`SSHPool.start_many`).

    ``fanout`` worker threads take the hosts in order; each connects its host, waits for
    :meth:`run` (or :meth:`cancel`), runs the command, and goes on to the next host — so at most
    ``fanout`` sessions are open at once, as in :meth:`SSHPool.run_many`. The workers wait at most
    ``wait_limit_s`` (s) for :meth:`run`; then they close their sessions and end, and :meth:`run`,
    if it still comes, connects those hosts afresh: a batch that is never run nor cancelled holds
    no session and no thread for longer than that (plus a handshake under way).

    Stopping: when :meth:`run` is interrupted (Ctrl-C) or ``on_done`` raises, no host that has not
    begun its command gets it. On Ctrl-C the commands under way are abandoned too (their channels
    closed within ~50 ms; sshd hangs up the remote processes) and KeyboardInterrupt is raised at
    once; any other exception is raised when the commands under way have ended. The workers are
    daemon threads: a process that exits does not wait for a handshake under way."""

    def __init__(self, pool: SSHPool, hosts: Sequence[str], *, close: bool = False, wait_limit_s: float = 30.0):
        self.pool = pool
        self.hosts = list(hosts)
        self._close = close
        self._wait_limit_s = wait_limit_s
        self._go = threading.Event()
        self._abort = threading.Event()  # Ctrl-C: commands not begun are not started, those under way end
        self._cancelled = self._expired = False
        self._argv_for: Callable[[str], Sequence[str]] | None = None
        self._timeout: float | None = None
        self._on_done: Callable[[CommandResult], None] | None = None
        self._results: list = [None] * len(self.hosts)
        self._workers = Workers(len(self.hosts), pool.fanout, self._work, "mfctl-ssh")

    def _work(self, i: int) -> None:
        self._results[i] = self._one(self.hosts[i])

    def _one(self, host: str):
        if not self._go.is_set():
            if self._expired:
                return _LATE
            self.pool._connect_ahead(host)
            if not self._go.wait(self._wait_limit_s):
                self._expired = True
                self.pool._forget(host)
                return _LATE
        if self._cancelled or self._workers.stop.is_set():
            self.pool._forget(host)
            return None
        r = self.pool.run(host, self._argv_for(host), timeout=self._timeout, abort=self._abort)
        if self._close:
            self.pool._drop_exec(host)
        if self._on_done:
            self._on_done(r)
        return r

    def run(self, argv_for: Callable[[str], Sequence[str]], *, timeout: float | None = None,
            on_done: Callable[[CommandResult], None] | None = None) -> list[CommandResult]:
        """Run ``argv_for(host)`` on every host (``timeout``: per command, s; default the pool's);
        the results in host order, as :meth:`SSHPool.run_many`. Raises RuntimeError once cancelled,
        and what ``on_done`` raised (after the commands under way have ended; no new host starts)."""
        if self._cancelled:
            raise RuntimeError("this batch was cancelled")
        self._argv_for, self._timeout, self._on_done = argv_for, timeout, on_done
        self._go.set()
        try:
            self._workers.join()
        except BaseException:  # Ctrl-C: no host that has not begun gets the command, and those under way end
            self._workers.stop.set()
            self._abort.set()  # this batch's only: other batches on the pool go on
            self._workers.join(within_s=1.0)  # (a handshake under way is not waited for: daemon threads)
            raise
        self._workers.raise_first()
        results = self._results
        late = [h for h, r in zip(self.hosts, results) if r is _LATE]
        if late:
            again = iter(Batch(self.pool, late, close=self._close).run(argv_for, timeout=timeout, on_done=on_done))
            results = [next(again) if r is _LATE else r for r in results]
        return results

    def cancel(self) -> None:
        """Give up before :meth:`run`: no command is run; every session the batch opened is closed
        (a handshake under way is closed when it ends; this does not wait for it). Does nothing once
        :meth:`run` has begun, or a second time."""
        if self._go.is_set():
            return
        self._cancelled = True
        self._go.set()


def targets_from_inventory(inv) -> list[SSHTarget]:
    """SSH targets for every host of an :class:`~mfctl.inventory.Inventory`."""
    return targets_from_data(inv.model_dump(mode="json", include={"ssh": True, "hosts": {"__all__": {"name", "ssh"}}}),
                             inv.base_dir)


def targets_from_data(doc: dict, base: Path | None) -> list[SSHTarget]:
    """SSH targets for every host of a validated inventory as JSON data (``Inventory.model_dump``
    or the inventory cache's JSON); ``base``: the inventory file's folder, against which relative
    key files and ``known_hosts`` are resolved (None: the working directory)."""
    def here(p: str) -> Path:
        p = Path(os.path.expanduser(p))  # (Path.expanduser raises for ~nosuchuser; this leaves it to fail later)
        return p if p.is_absolute() or base is None else base / p

    ssh = doc.get("ssh") or {}
    kh = str(here(ssh.get("known_hosts", "~/.ssh/known_hosts")))
    policy = ssh.get("host_key_policy", "strict")
    out = []
    for h in doc["hosts"]:
        e = h["ssh"]
        out.append(SSHTarget(name=h["name"], address=e["address"], port=e.get("port", 22), user=e.get("user", "root"),
                             key_file=str(here(e["key_file"])) if e.get("key_file") else None,
                             agent=e.get("agent", True), known_hosts=kh, host_key_policy=policy))
    return out
