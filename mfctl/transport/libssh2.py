"""One-shot remote commands over libssh2 (``ssh2-python``): the fan-out path.

:class:`mfctl.transport.ssh.SSHPool` runs commands (``run``/``run_many``: ``mfctl exec``,
the health sweep, provisioning, link polls) on these sessions, and keeps paramiko for the
long-lived interactive sessions (runtime launch with a pty, log following, the OCS CLI).
libssh2 does the handshake in C with the GIL released, so 128 hosts connect in parallel
threads at a fraction of paramiko's CPU cost (``benchmarks/fanout.py``).

The security rules are those of :mod:`mfctl.transport.ssh`: libssh2 is told to ask first for the
host-key algorithms of the key types known_hosts lists for the host (``method_pref``; libssh2's
own order puts ecdsa first, so a host known by ed25519 or rsa only would show a key the file does
not hold), and the key it got in the key exchange is judged by
:class:`mfctl.transport.hostkeys.HostKeyPolicy` (OpenSSH's rules: plain, hashed, wildcard and
``[host]:port`` entries, ``@revoked``; ``strict`` refuses an unknown host, ``accept-new`` records a
first-seen key; a key the file does not hold for a known host is CHANGED under both);
authentication by key file, SSH agent, or a password handed in by the caller from the environment.
Every failure is an :class:`~mfctl.errors.UnreachableError` naming the host, its address:port and
what happened (:func:`handshake_failure`, :func:`auth_failure`, :func:`command_failure`).

Every call is bounded: ``connect_timeout`` (s) for TCP, handshake and authentication;
``timeout`` (s) for a command from start to exit status.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import logging
import select
import signal
import socket
import struct
import threading
import time
from pathlib import Path

from ssh2 import exceptions as E
from ssh2 import session as S
from ssh2.error_codes import LIBSSH2_ERROR_EAGAIN

from mfctl.errors import SSHKeyError, UnreachableError
from mfctl.transport.hostkeys import HostKeyPolicy, algorithm_preference

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


class SessionGone(Exception):
    """The server had closed the session before the command was sent (no channel could be opened):
    the command did not start. ``reused``: the session had run commands before — a pooled session
    that sshd dropped while idle (restart, ClientAliveInterval, a firewall's idle timeout), which the
    pool replaces once."""

    def __init__(self, reused: bool):
        super().__init__("the server closed the connection before the command started")
        self.reused = reused


class ExecSession:
    """An authenticated libssh2 session to one host; commands run one at a time (a lock)."""

    def __init__(self, target, connect_timeout: float):
        self.target = target
        self.lock = threading.Lock()
        self._abort: threading.Event | None = None  # run()'s: once set, its command ends (CommandAborted) in ~50 ms
        self._close_after_run = False  # close() came while a command ran: run() closes when it is done
        self.used = False  # a command has been started on it (SessionGone.reused)
        t = target
        policy = HostKeyPolicy.of(t)
        known = policy.known_types(t.address, t.port, host=t.name)  # (an unreadable file: refused before any socket)
        problem = key_file_problem(t.key_file) if t.key_file and not t.password else None
        if problem:  # (a key that cannot be used: refused before any socket too)
            raise SSHKeyError(f"{t.name}: {problem}")
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
        self.session.method_pref(S.LIBSSH2_METHOD_HOSTKEY, ",".join(
            algorithm_preference(self.session.supported_algs(S.LIBSSH2_METHOD_HOSTKEY), known)))
        stage = "handshake"
        try:
            self.session.handshake(self.sock)
            self._check_host_key(policy)
            stage = "auth"
            self._authenticate()
        except UnreachableError:
            self.close()
            raise
        except E.Timeout as e:
            self.close()
            raise UnreachableError(f"{t.name}: SSH to {t.address}:{t.port} timed out after {connect_timeout:g} s "
                                   f"({'in the key exchange' if stage == 'handshake' else 'authenticating'})") from e
        except (E.SSH2Error, OSError) as e:
            why = handshake_failure(e, _last_error(self.session)) if stage == "handshake" else auth_failure(e, t)
            self.close()
            raise UnreachableError(f"{t.name}: SSH to {t.address}:{t.port} failed: {why}") from e

    # --- connection -------------------------------------------------------------------------
    def _check_host_key(self, policy: HostKeyPolicy) -> None:
        """The server's key, judged by the one host-key policy (:mod:`mfctl.transport.hostkeys`)."""
        t = self.target
        key, ktype = self.session.hostkey()
        policy.check(t.name, t.address, t.port, _KEYTYPES.get(ktype, f"libssh2 key type {ktype}"), key)

    def _authenticate(self) -> None:
        t = self.target
        if t.password:
            self.session.userauth_password(t.user, t.password)
        elif t.key_file:
            key = Path(t.key_file).expanduser()
            try:
                self.session.userauth_publickey_fromfile(t.user, str(key))
            except (E.FileError, E.PublicKeyInitError) as e:
                raise UnreachableError(f"{t.name}: SSH key {key} could not be used ({_describe(e)}): a damaged key, or "
                                       f"one of a type libssh2 cannot read ({_last_error(self.session) or 'no detail'})") from e
        elif t.agent:
            self.session.agent_auth(t.user)
        else:
            raise UnreachableError(f"{t.name}: no way to authenticate (no key file, agent or password)")
        if not self.session.userauth_authenticated():
            raise UnreachableError(f"{t.name}: SSH to {t.address}:{t.port} failed: {auth_refused(t)}")

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
        ~50 ms of ``abort`` being set, SessionGone when the server had closed the session before the
        command was sent, ssh2 exceptions on a session that broke under the command."""
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
            reused, self.used = self.used, True
            try:
                chan = self._call(self.session.open_session, deadline)
            except (E.SocketRecvError, E.SocketDisconnectError, E.SocketSendError) as e:
                raise SessionGone(reused) from e
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
                signame = exit_signal(chan, self.session)
                rc = signal_exit_code(signame) if signame else chan.get_exit_status()
                return rc, bytes(out), bytes(err), dropped[0], dropped[1]
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


class _ExitSignalReader:
    """Reads the signal name of an SSH ``exit-signal`` (RFC 4254 §6.10) from libssh2 itself.

    OpenSSH reports a command killed by a signal with ``exit-signal`` and *no* ``exit-status``;
    libssh2's ``get_exit_status`` then says 0, and ssh2-python 1.2.0's ``Channel.get_exit_signal``
    never returns the name (it passes libssh2 NULL length pointers and reads length 0). So this
    calls ``libssh2_channel_get_exit_signal`` of the libssh2 the extension is linked with
    (ctypes), with the C pointers of the Cython ``Channel``/``Session`` objects. Their layout
    (``PyObject`` head, then the declared fields: ssh2/channel.pxd, ssh2/session.pxd) is checked
    on every call against a field Python can see (``Channel._session is chan.session``,
    ``Session.sock``); where it does not hold (another ssh2-python), the reader is off and a
    signal reads as libssh2 says (logged once).
    """

    def __init__(self) -> None:
        self.fn = self.free = None
        self.warned = False
        try:
            import ssh2.channel

            lib = ctypes.CDLL(ssh2.channel.__file__)  # dlsym searches its libssh2 too
            fn, free = lib.libssh2_channel_get_exit_signal, lib.libssh2_free
        except (OSError, AttributeError) as e:  # pragma: no cover - a build without these symbols
            log.warning("libssh2: cannot read exit-signal (%s): a command killed by a signal reads as its exit status", e)
            return
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p]
        self.fn, self.free = fn, free

    @staticmethod
    def _field(obj, index: int):
        return ctypes.c_void_p.from_address(id(obj) + _HEAD + _PTR * index).value

    def _layout_ok(self, chan, session) -> bool:
        try:
            return (chan.session is session
                    and ctypes.cast(self._field(chan, 1), ctypes.py_object).value is session  # Channel._session
                    and ctypes.cast(self._field(session, 2), ctypes.py_object).value is session.sock)  # Session.sock
        except (ValueError, TypeError, AttributeError):
            return False

    def __call__(self, chan, session) -> str | None:
        if self.fn is None:
            return None
        if not self._layout_ok(chan, session):
            if not self.warned:
                self.warned = True
                log.warning("libssh2: ssh2-python's object layout is not the expected one: exit-signal not read")
            return None
        name, length = ctypes.c_void_p(), ctypes.c_size_t(0)
        if self.fn(self._field(chan, 0), ctypes.byref(name), ctypes.byref(length), None, None, None, None) != 0 \
                or not name.value:
            return None
        try:
            return ctypes.string_at(name.value, length.value).decode("ascii", errors="replace")
        finally:
            self.free(self._field(session, 0), name.value)


_HEAD = 2 * ctypes.sizeof(ctypes.c_void_p)  # PyObject_HEAD: ob_refcnt, ob_type (no vtable: no cdef methods)
_PTR = ctypes.sizeof(ctypes.c_void_p)  # Channel: _channel, _session; Session: _session, _sock (int, padded), sock
_exit_signal_reader: _ExitSignalReader | None = None


def exit_signal(chan, session) -> str | None:
    """The name (``TERM``, ``KILL``…, no ``SIG``) of the signal that killed the command on
    ``chan``, as the server's exit-signal said; None when the command exited (or nothing said)."""
    global _exit_signal_reader
    if _exit_signal_reader is None:
        _exit_signal_reader = _ExitSignalReader()
    return _exit_signal_reader(chan, session)


def signal_exit_code(name: str) -> int:
    """A command killed by signal ``name`` as a shell reports it: 128 + N (``TERM`` → 143); a
    name this machine does not know → 255 (what OpenSSH's ``ssh`` exits with on exit-signal)."""
    try:
        return 128 + signal.Signals["SIG" + name].value
    except KeyError:
        return 255


def key_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be an SSH private key (unreadable, not PEM/OpenSSH, protected by a
    passphrase), or None. Reads 1 KiB, never the whole file (a device, a huge file)."""
    try:
        with open(Path(path).expanduser(), "rb") as f:
            head = f.read(1024)
    except OSError as e:
        return f"cannot load SSH key {path}: {e.strerror or e}"
    if b"PRIVATE KEY-----" not in head:
        return f"SSH key {path} is not a PEM/OpenSSH private key file"
    if _encrypted(head):
        return (f"SSH key {path} is protected by a passphrase, and mfctl never asks for one: load it into the SSH "
                f"agent (ssh-add {path}) and remove key_file (the agent is used when no key_file is set)")
    return None


_OPENSSH_BEGIN = b"-----BEGIN OPENSSH PRIVATE KEY-----"
_OPENSSH_MAGIC = b"openssh-key-v1\0"


def _encrypted(head: bytes) -> bool:
    """Whether a private key file's first bytes say it is encrypted: PEM ``Proc-Type: 4,ENCRYPTED``
    or PKCS#8 ``BEGIN ENCRYPTED PRIVATE KEY``; OpenSSH's format (PROTOCOL.key): magic, then the
    cipher name, ``none`` when unencrypted."""
    if b"ENCRYPTED" in head.split(b"-----END", 1)[0]:
        return True
    if _OPENSSH_BEGIN not in head:
        return False
    b64 = b"".join(head.split(_OPENSSH_BEGIN, 1)[1].split(b"-----", 1)[0].split())
    try:
        raw = base64.b64decode(b64[:len(b64) // 4 * 4])
    except (binascii.Error, ValueError):
        return False
    if not raw.startswith(_OPENSSH_MAGIC) or len(raw) < len(_OPENSSH_MAGIC) + 4:
        return False
    (n,) = struct.unpack(">I", raw[len(_OPENSSH_MAGIC):len(_OPENSSH_MAGIC) + 4])
    cipher = raw[len(_OPENSSH_MAGIC) + 4:len(_OPENSSH_MAGIC) + 4 + n]
    return cipher != b"none"


def _last_error(session) -> str:
    """libssh2's own words for its last error (``Failed getting banner``…), or ``""``."""
    try:
        return session.last_error() or ""
    except Exception:  # noqa: BLE001 - a diagnostic only; ssh2-python may raise on a torn-down session
        return ""


#: what a failed key exchange means, in the words both SSH stacks use (paramiko's in ssh.connect)
CLOSED_BEFORE_BANNER = ("the server closed the connection before sending its SSH banner (sshd refusing more "
                        "unauthenticated connections: MaxStartups; or no SSH server on that port)")
CLOSED_IN_KEX = ("the server closed the connection during the key exchange, after its SSH banner (sshd's "
                 "MaxStartups or a firewall, or a server that refused this client)")
NO_COMMON_ALGORITHM = "key exchange failed: the server and mfctl have no algorithm in common"


def handshake_failure(e: BaseException, last_error: str = "") -> str:
    """What a libssh2 handshake failure means (``last_error``: :func:`_last_error` of its session)."""
    if "banner" in last_error.lower():
        return CLOSED_BEFORE_BANNER
    if isinstance(e, E.KexFailureError) or "no suitable" in last_error.lower() or "agree" in last_error.lower():
        return f"{NO_COMMON_ALGORITHM} ({last_error})" if last_error else NO_COMMON_ALGORITHM
    if isinstance(e, (E.SocketRecvError, E.SocketDisconnectError, ConnectionError)) or (
            type(e) is E.SSH2Error and "exchange" in last_error.lower()):
        return CLOSED_IN_KEX
    detail = _describe(e) + (f": {last_error}" if last_error and last_error not in str(e) else "")
    return f"the SSH handshake failed ({detail})"


def auth_refused(t) -> str:
    """The server said no to every credential offered (both stacks' words)."""
    if t.password:
        return f"authentication as {t.user} refused: the server does not accept the password"
    how = f"the key {t.key_file}" if t.key_file else "the SSH agent's keys (ssh-add -l lists them)"
    return f"authentication as {t.user} refused: the server accepts none of {how}; is the public key in its authorized_keys?"


def no_agent(t) -> str:
    return (f"no credential to offer for {t.user}: no SSH agent with a key answers (SSH_AUTH_SOCK unset, its agent "
            "gone, or ssh-add -l lists no key) and the inventory names no key_file for this host")


def auth_failure(e: BaseException, t) -> str:
    """What a libssh2 authentication failure means for target ``t``."""
    if isinstance(e, E.AgentConnectionError):
        return no_agent(t)
    if isinstance(e, (E.AgentAuthenticationError, E.AgentListIdentitiesError, E.AgentGetIdentityError)):
        return auth_refused(t) if t.agent and not t.key_file else _describe(e)
    if isinstance(e, (E.AuthenticationError, E.PublickeyUnverifiedError)):
        return auth_refused(t)
    if isinstance(e, (E.SocketRecvError, E.SocketDisconnectError, E.SocketSendError)):
        return "the server closed the connection while mfctl authenticated"
    return _describe(e)


def command_failure(e: BaseException, endpoint: str) -> str:
    """A session that broke while a command ran, in a result's words (``SSH error: …``): the
    command's outcome is unknown (it may have run, or still run on the host)."""
    if isinstance(e, (E.SocketRecvError, E.SocketDisconnectError, E.SocketSendError, ConnectionError)):
        return (f"SSH error: the connection to {endpoint} was lost while the command ran (the server closed it: "
                "its sshd session ended, sshd restarted, or the host went down); the command's outcome is unknown")
    return f"SSH error on {endpoint} while the command ran: {_describe(e)}"


def _describe(e: Exception) -> str:
    """libssh2's exceptions often carry no text: say what their class means. The same cause gives
    the same words whichever of libssh2's classes reported it (a server that closes the connection
    is SocketRecvError or SocketDisconnectError by timing), so that hosts fold together."""
    name = type(e).__name__
    return f"{_WHAT[name]}{f' ({e})' if str(e) else ''}" if name in _WHAT else (str(e) or name)
