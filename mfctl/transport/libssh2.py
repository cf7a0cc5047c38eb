"""One-shot remote commands over libssh2 (``ssh2-python``): the fan-out path.

:class:`mfctl.transport.ssh.SSHPool` runs commands (``run``/``run_many``: ``mfctl exec``,
the health sweep, provisioning, link polls) on these sessions, and keeps paramiko for the
long-lived interactive sessions (runtime launch with a pty, log following, the OCS CLI).
libssh2 does the handshake in C with the GIL released, so 128 hosts connect in parallel
threads at a fraction of paramiko's CPU cost (``benchmarks/fanout.py``).

The security rules are those of :mod:`mfctl.transport.ssh`: the host key libssh2 got in the
key exchange (type and blob) is judged by :class:`mfctl.transport.hostkeys.HostKeyPolicy`
against the inventory's ``known_hosts`` (plain, hashed and ``[host]:port`` entries); ``strict``
refuses an unknown host, ``accept-new`` records a first-seen key and still refuses a changed one;
authentication by key file, SSH agent, or a
password handed in by the caller from the environment.

Every call is bounded: ``connect_timeout`` (s) for TCP, handshake and authentication;
``timeout`` (s) for a command from start to exit status.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from pathlib import Path

from ssh2 import exceptions as E
from ssh2 import session as S
from ssh2.error_codes import LIBSSH2_ERROR_EAGAIN

from mfctl.errors import UnreachableError
from mfctl.transport.hostkeys import HostKeyPolicy

log = logging.getLogger(__name__)

# libssh2 host key type → its name in known_hosts
_KEYTYPES = {
    S.LIBSSH2_HOSTKEY_TYPE_RSA: "ssh-rsa",
    S.LIBSSH2_HOSTKEY_TYPE_DSS: "ssh-dss",
    S.LIBSSH2_HOSTKEY_TYPE_ECDSA_256: "ecdsa-sha2-nistp256",
    S.LIBSSH2_HOSTKEY_TYPE_ECDSA_384: "ecdsa-sha2-nistp384",
    S.LIBSSH2_HOSTKEY_TYPE_ECDSA_521: "ecdsa-sha2-nistp521",
    S.LIBSSH2_HOSTKEY_TYPE_ED25519: "ssh-ed25519",
}
_READ_SIZE = 65536  # per read call (libssh2's window is 2 MiB; ssh2-python's default of 1 KiB costs CPU on big outputs)


class CommandTimeout(TimeoutError):
    pass


class CommandAborted(Exception):
    """The caller gave up on the command (its ``abort`` event was set: Ctrl-C)."""


class ExecSession:
    """An authenticated libssh2 session to one host; commands run one at a time (a lock)."""

    def __init__(self, target, connect_timeout: float):
        self.target = target
        self.lock = threading.Lock()
        self._abort: threading.Event | None = None  # run()'s: once set, its command ends (CommandAborted) in ~50 ms
        self._close_after_run = False  # close() came while a command ran: run() closes when it is done
        t = target
        try:
            # the address as bytes: inventory addresses are ASCII (an IP or a host name, checked by the
            # schema); a str would be encoded with the idna codec, whose first import is ~7 ms of a cold start
            host = t.address.encode() if t.address.isascii() else t.address
            self.sock = socket.create_connection((host, t.port), timeout=connect_timeout)
        except (socket.timeout, TimeoutError) as e:
            raise UnreachableError(f"{t.name}: connect to {t.address}:{t.port} timed out after {connect_timeout:g} s") from e
        except OSError as e:
            raise UnreachableError(f"{t.name}: cannot connect to {t.address}:{t.port}: {e.strerror or e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session = S.Session()
        self.session.set_timeout(int(connect_timeout * 1000))
        try:
            self.session.handshake(self.sock)
            self._check_host_key()
            self._authenticate()
        except UnreachableError:
            self.close()
            raise
        except E.Timeout as e:
            self.close()
            raise UnreachableError(f"{t.name}: SSH to {t.address}:{t.port} timed out after {connect_timeout:g} s") from e
        except (E.SSH2Error, OSError) as e:
            self.close()
            raise UnreachableError(f"{t.name}: SSH to {t.address}:{t.port} failed: {_describe(e)}") from e

    # --- connection -------------------------------------------------------------------------
    def _check_host_key(self) -> None:
        """The server's key, judged by the one host-key policy (:mod:`mfctl.transport.hostkeys`)."""
        t = self.target
        key, ktype = self.session.hostkey()
        name = _KEYTYPES.get(ktype)
        if name is None:
            raise UnreachableError(f"{t.name}: unsupported host key type {ktype}")
        HostKeyPolicy.of(t).check(t.name, t.address, t.port, name, key)

    def _authenticate(self) -> None:
        t = self.target
        if t.password:
            self.session.userauth_password(t.user, t.password)
        elif t.key_file:
            key = Path(t.key_file).expanduser()
            problem = key_file_problem(key)
            if problem:
                raise UnreachableError(f"{t.name}: {problem}")
            try:
                self.session.userauth_publickey_fromfile(t.user, str(key))
            except (E.FileError, E.PublicKeyInitError) as e:
                raise UnreachableError(f"{t.name}: SSH key {key} could not be used ({_describe(e)}): a damaged key, or "
                                       "one with a passphrase (mfctl never asks: load it into the SSH agent)") from e
        elif t.agent:
            self.session.agent_auth(t.user)
        else:
            raise UnreachableError(f"{t.name}: no way to authenticate (no key file, agent or password)")
        if not self.session.userauth_authenticated():
            raise UnreachableError(f"{t.name}: authentication as {t.user} failed")

    # --- commands ---------------------------------------------------------------------------
    def _wait(self, deadline: float) -> None:
        """Wait until the socket is ready in the direction libssh2 blocked on, for a slice that
        grows from 1 ms to 50 ms while a command keeps waiting (reset by :meth:`run`).

        The slice is capped because libssh2 can answer EAGAIN with a packet already read into
        its own buffer (seen with ``channel_wait_closed``): a select on the socket alone would
        then sleep until its timeout although everything has arrived."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommandTimeout
        if self._abort is not None and self._abort.is_set():
            raise CommandAborted
        self._slice = min(self._slice * 2, 0.05)
        d = self.session.block_directions()
        r = [self.sock] if d & S.LIBSSH2_SESSION_BLOCK_INBOUND or not d else []
        w = [self.sock] if d & S.LIBSSH2_SESSION_BLOCK_OUTBOUND else []
        select.select(r, w, [], min(remaining, self._slice))

    def _call(self, fn, deadline: float, *args):
        """Call a non-blocking libssh2 function until it stops answering EAGAIN."""
        while True:
            rc = fn(*args)
            if rc != LIBSSH2_ERROR_EAGAIN:
                return rc
            self._wait(deadline)

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            abort: threading.Event | None = None, limit: int | None = None) -> tuple[int, bytes, bytes, int, int]:
        """Run ``command`` (already quoted for the remote shell); return ``(rc, stdout, stderr,
        stdout_dropped, stderr_dropped)``: at most ``limit`` bytes of each stream are kept (None: all),
        the rest is read and counted, not kept — the command is drained to its end, so it never
        blocks on a full channel and its exit status is its own, and memory stays bounded while it runs.
        Raises CommandTimeout after ``timeout`` seconds, CommandAborted (its channel closed) within
        ~50 ms of ``abort`` being set, ssh2 exceptions on a broken session."""
        try:
            return self._run(command, timeout, stdin, abort, limit)
        finally:
            if self._close_after_run:
                self.close()

    def _run(self, command: str, timeout: float, stdin: bytes | None, abort: threading.Event | None,
             limit: int | None):
        deadline = time.monotonic() + timeout
        with self.lock:
            self._abort = abort
            if abort is not None and abort.is_set():
                raise CommandAborted
            self._slice = 0.0005
            self.session.set_blocking(False)
            chan = self._call(self.session.open_session, deadline)
            if isinstance(chan, int):
                raise E.ChannelError(f"open_session failed ({chan})")
            try:
                self._call(chan.execute, deadline, command)
                if stdin:
                    view = memoryview(stdin)
                    while view:
                        rc, n = chan.write(bytes(view[:32768]))
                        if rc == LIBSSH2_ERROR_EAGAIN:
                            self._wait(deadline)
                            continue
                        view = view[n:]
                if stdin is not None:
                    self._call(chan.send_eof, deadline)
                out, err = bytearray(), bytearray()
                dropped = [0, 0]  # bytes of stdout, stderr read beyond ``limit``
                cap = limit if limit is not None else -1
                while True:
                    progressed = False
                    for k, reader, buf in ((0, chan.read, out), (1, chan.read_stderr, err)):
                        while True:
                            n, data = reader(_READ_SIZE)
                            if n <= 0:
                                break
                            progressed = True
                            room = n if cap < 0 else max(0, cap - len(buf))
                            if room >= n:
                                buf += data
                            else:
                                buf += data[:room]
                                dropped[k] += n - room
                    if chan.eof():
                        break
                    if not progressed:
                        self._wait(deadline)
                self._call(chan.close, deadline)
                self._call(chan.wait_closed, deadline)  # the exit status has arrived by now
                return chan.get_exit_status(), bytes(out), bytes(err), dropped[0], dropped[1]
            except (CommandTimeout, CommandAborted):
                try:
                    chan.close()
                except E.SSH2Error:
                    pass
                raise

    def close(self, wait_s: float = 2.0) -> None:
        """Say goodbye and close the socket. A libssh2 session must not be used by two threads at
        once, so this waits (≤ ``wait_s``) for a command under way in another thread; if it does not
        end, the socket is shut down (not closed: its descriptor stays ours) so that the command
        fails at once, and that command's :meth:`run` closes the session when it returns."""
        if not self.lock.acquire(timeout=max(0.0, wait_s)):
            self._close_after_run = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        try:
            self.session.set_blocking(True)
            self.session.set_timeout(1000)
            self.session.disconnect()
        except (E.SSH2Error, OSError):
            pass
        finally:
            self._close_after_run = False
            self.lock.release()
        try:
            self.sock.close()
        except OSError:
            pass


_WHAT = {"SocketRecvError": "the server closed the connection", "SocketDisconnectError": "the server closed the connection",
         "BannerRecvError": "no SSH banner (the server closed the connection)", "KexFailureError": "key exchange failed "
         "(no algorithm in common)", "KeyExchangeError": "key exchange failed", "AuthenticationError": "authentication refused",
         "PublickeyUnverifiedError": "the key was refused", "AgentConnectionError": "no SSH agent to ask for keys"}


def key_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be an SSH private key (unreadable, not PEM/OpenSSH), or None.
    Reads 64 bytes, never the whole file (a device, a huge file)."""
    try:
        with open(Path(path).expanduser(), "rb") as f:
            head = f.read(64)
    except OSError as e:
        return f"cannot load SSH key {path}: {e.strerror or e}"
    if b"PRIVATE KEY-----" not in head:
        return f"SSH key {path} is not a PEM/OpenSSH private key file"
    return None


def _describe(e: Exception) -> str:
    """libssh2's exceptions often carry no text: say what their class means. The same cause gives
    the same words whichever of libssh2's classes reported it (a server that closes the connection
    is SocketRecvError or SocketDisconnectError by timing), so that hosts fold together."""
    name = type(e).__name__
    return f"{_WHAT[name]}{f' ({e})' if str(e) else ''}" if name in _WHAT else (str(e) or name)
