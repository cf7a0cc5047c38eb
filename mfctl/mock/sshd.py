"""A small SSH server on 127.0.0.1 (paramiko server mode) for mock hosts and the mock OCS.

Each accepted connection runs in its own thread. ``exec`` requests call
``on_exec(command, channel)``; ``shell`` requests call ``on_shell(channel)``. Both run in a
new thread and must close the channel (with an exit status) when done.
"""

from __future__ import annotations

import logging
import socket
import threading
import weakref
from typing import Callable

import paramiko

log = logging.getLogger(__name__)

_orig_handle_request = paramiko.Channel._handle_request


def _handle_request_then_start(self, m):
    """Start exec/shell handlers only after paramiko has sent CHANNEL_SUCCESS.

    paramiko calls ``check_channel_exec_request`` *before* it replies; a handler thread
    started there can send exit status and CLOSE ahead of the SUCCESS, and the client then
    fails with "Channel closed.". OpenSSH always replies first; so does this mock.
    """
    _orig_handle_request(self, m)
    start = getattr(self, "_mfctl_start", None)
    if start is not None:
        self._mfctl_start = None
        start()


paramiko.Transport._channel_handler_table[paramiko.common.MSG_CHANNEL_REQUEST] = _handle_request_then_start


class _Server(paramiko.ServerInterface):
    def __init__(self, owner: "MockSSHServer"):
        self.owner = owner

    def check_auth_publickey(self, username, key):
        ok = any(key == k for k in self.owner.authorized_keys) and username in self.owner.users
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_auth_password(self, username, password):
        ok = self.owner.password is not None and username in self.owner.users and password == self.owner.password
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def get_allowed_auths(self, username):
        return ",".join((["publickey"] if self.owner.authorized_keys else []) + (["password"] if self.owner.password else []))

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_pty_request(self, channel, term, width, height, pixelwidth, pixelheight, modes):
        channel.mfctl_pty = True
        channel.mfctl_tty_reads_ctrl_c = True  # no real pty here: the host reads a ^C typed as its SIGINT (hosts._spawn)
        return True

    def check_channel_exec_request(self, channel, command):
        if self.owner.on_exec is None:
            return False
        cmd = command.decode("utf-8", errors="replace")
        t = threading.Thread(target=self.owner._run, args=(self.owner.on_exec, cmd, channel), daemon=True)
        channel._mfctl_start = t.start
        return True

    def check_channel_shell_request(self, channel):
        if self.owner.on_shell is None:
            return False
        t = threading.Thread(target=self.owner._run_shell, args=(channel,), daemon=True)
        channel._mfctl_start = t.start
        return True

    def check_channel_env_request(self, channel, name, value):
        return False


class MockSSHServer:
    """Listen on ``127.0.0.1:port`` (0 = any free port) with a fixed host key."""

    def __init__(self, name: str, host_key: paramiko.PKey, *, users: set[str], authorized_keys: list[paramiko.PKey] = (),
                 password: str | None = None, on_exec: Callable | None = None, on_shell: Callable | None = None,
                 port: int = 0):
        self.name = name
        self.host_key = host_key
        self.users = users
        self.authorized_keys = list(authorized_keys)
        self.password = password
        self.on_exec, self.on_shell = on_exec, on_shell
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.refuse = False  # fault injection: close connections at once
        self._stop = threading.Event()
        self._transports: weakref.WeakSet[paramiko.Transport] = weakref.WeakSet()  # live ones only: no leak
        threading.Thread(target=self._accept, daemon=True, name=f"sshd-{name}").start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.refuse:
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self._transports.add(t)
            t.start_server(server=_Server(self))
        except (paramiko.SSHException, OSError, EOFError) as e:
            log.debug("%s: handshake failed: %s", self.name, e)
            conn.close()

    def _run(self, fn, cmd, channel) -> None:
        try:
            rc = fn(cmd, channel)
        except Exception as e:  # a handler bug must not kill the server thread silently
            log.exception("%s: exec handler failed for %r", self.name, cmd)
            try:
                channel.sendall_stderr(f"mock: internal error: {e}\n".encode())
            except OSError:
                pass
            rc = 255
        try:
            rc = int(rc or 0)
            channel.send_exit_status(128 - rc if rc < 0 else rc & 0xFF)  # killed by signal N: 128 + N, as a shell says
            channel.shutdown_write()
            channel.close()
        except (OSError, EOFError):
            pass

    def _run_shell(self, channel) -> None:
        try:
            self.on_shell(channel)
        finally:
            try:
                channel.close()
            except (OSError, EOFError):
                pass

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        for t in list(self._transports):
            t.close()
