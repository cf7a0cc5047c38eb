"""SSH to hosts and devices: strict host keys, timeouts, pooling, fan-out (paramiko for
interactive sessions, libssh2 for commands: :class:`SSHPool`).

Host keys are checked against the inventory's ``known_hosts`` file. The default policy is
``strict`` (unknown host → :class:`UnreachableError`); ``accept-new`` records a key seen
for the first time and still rejects a *changed* key (like OpenSSH's
``StrictHostKeyChecking=accept-new``). Authentication: a key file or the SSH agent, or a
password passed in by the caller from the environment — never from an inventory.
"""

from __future__ import annotations

import logging
import shlex
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from mfctl.errors import UnreachableError

if TYPE_CHECKING:
    import paramiko

log = logging.getLogger(__name__)

# paramiko is imported where it is used: ``mfctl exec`` and the health sweep run commands over
# libssh2 only and do not pay paramiko's import (~0.1 s of every cold start).


def _accept_new_policy(known_hosts: Path):
    """A paramiko policy recording an unknown host's key in known_hosts (opt-in,
    ``host_key_policy: accept-new``)."""
    import paramiko

    class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):  # noqa: D401 - paramiko API
            client.get_host_keys().add(hostname, key.get_name(), key)
            known_hosts.parent.mkdir(parents=True, exist_ok=True)
            with open(known_hosts, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            log.warning("accepted new host key for %s (%s)", hostname, key.get_name())

    return AcceptNewPolicy()


@dataclass
class SSHTarget:
    """Where and how to log in. ``name`` is the inventory name used in results."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    agent: bool = True
    password: str | None = None  # only ever from the environment / a secret file
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: str = "strict"


_KH_CACHE: dict[str, tuple[float, "paramiko.HostKeys"]] = {}
_KH_LOCK = threading.Lock()


def _known_hosts(path: Path) -> paramiko.HostKeys | None:
    """Parsed known_hosts, cached per path and modification time (thread-safe)."""
    import paramiko

    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    with _KH_LOCK:
        hit = _KH_CACHE.get(str(path))
        if hit and hit[0] == mtime:
            return hit[1]
        hk = paramiko.HostKeys(str(path))
        _KH_CACHE[str(path)] = (mtime, hk)
        return hk


_PKEY_CACHE: dict[str, "paramiko.PKey"] = {}


def _private_key(path: str) -> paramiko.PKey:
    """Load a private key file once per process (any type paramiko knows). Encrypted keys
    belong in the SSH agent: mfctl never asks for a passphrase."""
    import paramiko

    p = str(Path(path).expanduser())
    with _KH_LOCK:
        if p not in _PKEY_CACHE:
            try:
                _PKEY_CACHE[p] = paramiko.PKey.from_path(p)
            except (OSError, paramiko.SSHException, ValueError) as e:
                raise UnreachableError(f"cannot load SSH key {p}: {e}") from e
        return _PKEY_CACHE[p]


def connect(target: SSHTarget, timeout: float) -> paramiko.SSHClient:
    """Open an authenticated SSH connection. Raises UnreachableError (exit 4)."""
    import paramiko

    client = paramiko.SSHClient()
    kh = Path(target.known_hosts).expanduser()
    known = _known_hosts(kh)
    if known is not None:
        # only this host's entries: parsing a large known_hosts file per connection is O(hosts²)
        name = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
        for keytype, key in (known.lookup(name) or {}).items():
            client.get_host_keys().add(name, keytype, key)
    if target.host_key_policy == "accept-new":
        client.set_missing_host_key_policy(_accept_new_policy(kh))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        sock = socket.create_connection((target.address, target.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(
            target.address,
            sock=sock,
            port=target.port,
            username=target.user,
            pkey=_private_key(target.key_file) if target.key_file else None,
            password=target.password,
            allow_agent=target.agent and not target.password,
            look_for_keys=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
        )
    except paramiko.BadHostKeyException as e:
        client.close()
        raise UnreachableError(f"{target.name}: host key CHANGED for {target.address}:{target.port} — refusing to connect") from e
    except paramiko.SSHException as e:
        client.close()
        if "not found in known_hosts" in str(e):
            raise UnreachableError(
                f"{target.name}: host key of [{target.address}]:{target.port} is not in {kh} "
                "(add it, or set host_key_policy: accept-new)") from e
        raise UnreachableError(f"{target.name}: SSH to {target.address}:{target.port} failed: {e}") from e
    except (socket.timeout, TimeoutError) as e:
        client.close()
        raise UnreachableError(f"{target.name}: connect to {target.address}:{target.port} timed out after {timeout:g} s") from e
    except OSError as e:
        client.close()
        raise UnreachableError(f"{target.name}: cannot connect to {target.address}:{target.port}: {e.strerror or e}") from e
    return client


@dataclass
class CommandResult:
    """Per-host result of a command: data, never printed by the service (DESIGN §3)."""

    host: str
    argv: list[str]
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # unreachable / timeout / SSH failure, without the host name (it is .host)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.rc == 0

    def to_dict(self) -> dict:
        return {"host": self.host, "argv": self.argv, "rc": self.rc, "ok": self.ok, "stdout": self.stdout,
                "stderr": self.stderr, "error": self.error, "elapsed_s": round(self.elapsed_s, 4)}


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
                 command_timeout: float = 30.0, fanout: int = 32):
        self.targets = {t.name: t for t in targets}
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.fanout = max(1, fanout)
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._exec: dict = {}  # host → libssh2.ExecSession
        self._locks: dict[str, threading.Lock] = {n: threading.Lock() for n in self.targets}
        self._exec_locks: dict[str, threading.Lock] = {n: threading.Lock() for n in self.targets}

    def client(self, host: str) -> paramiko.SSHClient:
        with self._locks[host]:
            c = self._clients.get(host)
            if c is not None and c.get_transport() is not None and c.get_transport().is_active():
                return c
            c = connect(self.targets[host], self.connect_timeout)
            self._clients[host] = c
            return c

    def _exec_session(self, host: str):
        from mfctl.transport.libssh2 import ExecSession

        with self._exec_locks[host]:
            s = self._exec.get(host)
            if s is None:
                s = self._exec[host] = ExecSession(self.targets[host], self.connect_timeout)
            return s

    def run(self, host: str, argv: Sequence[str], *, timeout: float | None = None,
            stdin: bytes | None = None) -> CommandResult:
        """Run argv on one host; ``stdin`` (bytes) is sent and then closed (EOF).
        Never raises for remote failures: they are in the result."""
        from ssh2.exceptions import SSH2Error

        from mfctl.transport.libssh2 import CommandTimeout

        t0 = time.monotonic()
        res = CommandResult(host=host, argv=[str(a) for a in argv])
        timeout = timeout or self.command_timeout
        try:
            rc, out, err = self._exec_session(host).run(quote_argv(argv), timeout, stdin)
            res.rc, res.stdout, res.stderr = rc, out.decode(errors="replace"), err.decode(errors="replace")
        except UnreachableError as e:  # its message starts with the host, which the result carries already
            res.error = str(e).removeprefix(f"{host}: ")
        except CommandTimeout:
            res.error = f"timeout: command did not finish within {timeout:g} s"
            self._drop_exec(host)  # the session may hold the abandoned channel's data
        except (SSH2Error, OSError) as e:
            res.error = f"SSH error: {str(e) or type(e).__name__}"
            self._drop_exec(host)
        res.elapsed_s = time.monotonic() - t0
        return res

    def run_checked(self, host: str, argv: Sequence[str], *, timeout: float | None = None,
                    stdin: bytes | None = None) -> str:
        """Run argv and return its stdout; raise UnreachableError (no connection, timeout) or
        OperationFailed (non-zero exit) naming the host, the command and stderr."""
        from mfctl.errors import OperationFailed

        r = self.run(host, argv, timeout=timeout, stdin=stdin)
        if r.error:
            raise UnreachableError(f"{host}: {' '.join(map(str, argv))}: {r.error}")
        if r.rc != 0:
            raise OperationFailed(f"{host}: {' '.join(map(str, argv))}: exit {r.rc}: {(r.stderr or r.stdout).strip()[:300]}")
        return r.stdout

    def run_many(self, hosts: Sequence[str], argv_for: Callable[[str], Sequence[str]], *,
                 timeout: float | None = None, on_done: Callable[[CommandResult], None] | None = None,
                 close: bool = False) -> list[CommandResult]:
        """Run a command on many hosts in parallel (at most ``fanout`` at once), in host order.
        ``close``: end each host's session as soon as its command is done (one-shot callers such
        as ``mfctl exec``: the goodbyes then overlap the other hosts' work instead of following it)."""
        def one(h: str) -> CommandResult:
            r = self.run(h, argv_for(h), timeout=timeout)
            if close:
                self._drop_exec(h)
            if on_done:
                on_done(r)
            return r

        with ThreadPoolExecutor(max_workers=min(self.fanout, max(1, len(hosts)))) as ex:
            return list(ex.map(one, hosts))

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
        for h in set(self._clients) | set(self._exec):
            self.drop(h)

    def __enter__(self) -> "SSHPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def targets_from_inventory(inv) -> list[SSHTarget]:
    """SSH targets for every host of an :class:`~mfctl.inventory.Inventory`."""
    base = inv.base_dir
    out = []
    for h in inv.hosts:
        kp = h.ssh.key_path(base)
        kh = Path(inv.ssh.known_hosts).expanduser()
        if base is not None and not kh.is_absolute():
            kh = base / kh
        out.append(SSHTarget(name=h.name, address=h.ssh.address, port=h.ssh.port, user=h.ssh.user,
                             key_file=str(kp) if kp else None, agent=h.ssh.agent,
                             known_hosts=str(kh), host_key_policy=inv.ssh.host_key_policy))
    return out
