"""The mock's hosts behind real OpenSSH: one ``sshd`` per host on 127.0.0.1, its sessions relayed
to the mock testbed process (:mod:`mfctl.mock.relay` → :mod:`mfctl.mock.relayserver` → ``MockHost.handle``).

Which server the mock's hosts get is :func:`choose` of the ``mock.sshd`` setting
(``MFCTL_MOCK_SSHD`` / ``mfctl mock up --sshd``): ``openssh``, ``paramiko`` (:mod:`mfctl.mock.sshd`,
in-process) or ``auto`` — OpenSSH where ``sshd`` and ``ssh-keygen`` are installed, else paramiko.
The OCS's SSH endpoint stays a paramiko server either way: it is a device's CLI, not a host.

Each host has its own port and its own ed25519, ecdsa and rsa host keys (what Debian's sshd
generates; rsa at 2048 bits rather than Debian's 3072: ssh-keygen takes ~0.15 s instead of ~0.8 s,
per host and mock start), all listed in the mock's known_hosts as OpenSSH would file them.
"""

from __future__ import annotations

import logging
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from mfctl.mock import openssh
from mfctl.mock.relayserver import RelayServer

log = logging.getLogger(__name__)

CHOICES = ("auto", "openssh", "paramiko")
RELAY = Path(__file__).with_name("relay.py")
RSA_BITS = 2048
KEYGEN_TIMEOUT_S = 60.0


def choose(wanted: str) -> str:
    """``"openssh"`` or ``"paramiko"`` for the setting's value; raises ValueError for an unknown
    value, or for ``openssh`` where sshd cannot run (the reason: what to install)."""
    if wanted not in CHOICES:
        raise ValueError(f"mock.sshd must be one of {', '.join(CHOICES)}, got {wanted!r}")
    reason = openssh.unavailable_reason()
    if wanted == "openssh" and reason:
        raise ValueError(f"mock.sshd=openssh: {reason}")
    if wanted == "auto":
        return "paramiko" if reason else "openssh"
    return wanted


def generate_host_keys(directories: list[Path], types=openssh.HOST_KEY_TYPES) -> list[dict[str, Path]]:
    """Host keys for several sshds at once (``ssh-keygen`` in parallel): one ``{type: private key
    path}`` per directory, files ``ssh_host_<type>_key`` (mode 0600) and ``.pub``."""
    procs: list[tuple[str, subprocess.Popen]] = []
    out = []
    for d in directories:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        keys = {}
        for t in types:
            path = d / f"ssh_host_{t}_key"
            keys[t] = path
            if not path.exists():
                bits = ["-b", str(RSA_BITS)] if t == "rsa" else []
                argv = ["ssh-keygen", "-q", "-t", t, *bits, "-N", "", "-C", f"mfctl-mock-{t}", "-f", str(path)]
                procs.append((t, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.PIPE)))
        out.append(keys)
    try:
        for t, p in procs:
            _, err = p.communicate(timeout=KEYGEN_TIMEOUT_S)
            if p.returncode != 0:
                raise RuntimeError(f"ssh-keygen -t {t} failed ({p.returncode}): {err.decode().strip()}")
    except BaseException:  # a failure, a timeout, the mock stopped while starting: no ssh-keygen outlives it
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise
    return out


class _Refuser:
    """A listener on a host's port that closes every connection before the SSH banner
    (``--inject gpuNN:ssh=refuse``, as the paramiko mock's ``refuse``)."""

    def __init__(self, port: int):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.close()


class OpenSSHHost:
    """One mock host served by a real sshd: ``directory`` holds its keys, config and ``sshd.log``;
    ``socket_path`` is the relay's unix socket; ``on_exec(command, channel) -> exit status``.
    ``authorized_key``: the client's public key line; ``env``: what every session's environment
    gets (``SetEnv``; the relay is then found by a scan of this mock's processes)."""

    def __init__(self, name: str, directory: Path, socket_path: Path, on_exec: Callable, *, authorized_key: str,
                 host_keys: dict[str, Path], env: dict[str, str] | None = None):
        self.name = name
        self.relay = RelayServer(name, socket_path, on_exec)
        for p in (sys.executable, str(RELAY), str(socket_path)):
            if any(c in p for c in "\n\r\0"):
                raise ValueError(f"{name}: a path with a line break cannot go into sshd_config: {p!r}")
        force = " ".join(shlex.quote(x) for x in (sys.executable, "-I", "-S", str(RELAY), "--socket", str(socket_path)))
        self.sshd = openssh.OpenSSHServer(directory, authorized_keys=[f"restrict,pty {authorized_key}"],
                                          host_key_types=tuple(host_keys), host_keys=host_keys,
                                          force_command=force, env=env)
        self.port = self.sshd.port
        self._refuser: _Refuser | None = None

    def start(self) -> "OpenSSHHost":
        self.sshd.start()
        return self

    @property
    def refuse(self) -> bool:
        return self._refuser is not None

    @refuse.setter
    def refuse(self, on: bool) -> None:
        if on and self._refuser is None:
            self.sshd.close()
            self._refuser = _Refuser(self.port)
        elif not on and self._refuser is not None:
            self._refuser.close()
            self._refuser = None
            self.sshd.start()

    @property
    def log_path(self) -> Path:
        return self.sshd.log_path

    def known_hosts_lines(self) -> list[str]:
        """One ``[127.0.0.1]:port type base64`` line per host key the sshd offers."""
        return [self.sshd.known_hosts_line(t) for t in self.sshd.host_keys]

    def close(self) -> None:
        if self._refuser is not None:
            self._refuser.close()
        self.sshd.close()
        self.relay.close()


def start_all(hosts: list[OpenSSHHost]) -> None:
    """Start every host's sshd at once (each is ~0.1 s of ``sshd -t`` and start-up)."""
    errors: list[BaseException] = []

    def one(h: OpenSSHHost) -> None:
        try:
            h.start()
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # the mock stopped while starting: every sshd started is known before it closes them
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]
