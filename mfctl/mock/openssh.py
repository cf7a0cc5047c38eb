"""A real OpenSSH ``sshd`` on 127.0.0.1, started for the mock testbed and the tests.

:class:`OpenSSHServer` writes its own host keys (``ssh-keygen``), config and authorized_keys
into a directory of its own, then runs ``sshd -D -e -f CONFIG`` on a free loopback port
until :meth:`close`. It serves the user who starts it (as root: root; otherwise sshd runs
without privilege separation and only that user can log in — OpenSSH's rule for an
unprivileged sshd). ``StrictModes no`` lets the keys live in a temporary directory.

With ``force_command`` set, every session runs that command instead of the client's
(``ForceCommand``; the client's command line is in ``$SSH_ORIGINAL_COMMAND``) — how the mock
puts its host simulator behind the real transport.

Nothing listens beyond ``127.0.0.1``; no password, keyboard-interactive or PAM login is
offered; no agent, X11 or TCP forwarding.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from mfctl.mockctl import reap_stale_sshds

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
HOST_KEY_TYPES = ("ed25519", "ecdsa", "rsa")  # what Debian's sshd generates, in OpenSSH's default order
START_TIMEOUT_S = 10.0  # an sshd on loopback is up in well under a second


def sshd_path() -> str | None:
    """The sshd binary, or None where OpenSSH's server is not installed."""
    for p in SSHD_CANDIDATES:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("sshd")


def unavailable_reason() -> str | None:
    """Why a real sshd cannot run here (for a test's skip), or None when it can."""
    if sshd_path() is None:
        return "OpenSSH's sshd is not installed (Debian: apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is not installed (Debian: apt-get install openssh-client)"
    return None


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc; [] where there is no /proc)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
            if len(fields) > 1 and int(fields[1]) == pid:
                out.append(int(e))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OpenSSHServer:
    """One sshd on ``127.0.0.1:port`` serving ``directory`` (created, mode 0700).

    ``host_key_types``: which host keys to generate and offer (subset of ``HOST_KEY_TYPES``);
    ``authorized_keys``: public key lines allowed to log in; ``force_command``: see module doc;
    ``env``: variables sshd passes on to every session (``SetEnv``); ``options``: sshd_config keywords
    that replace the defaults or are added (``{"MaxStartups": "1"}``).
    """

    def __init__(self, directory: str | Path, *, authorized_keys: list[str], host_key_types=HOST_KEY_TYPES,
                 force_command: str | None = None, env: dict[str, str] | None = None, port: int = 0,
                 host_keys: dict[str, Path] | None = None, options: dict[str, str] | None = None):
        binary = sshd_path()
        if binary is None:
            raise FileNotFoundError(unavailable_reason())
        self.binary = binary
        self.dir = Path(directory).resolve()
        reap_stale_sshds(self.dir)  # one left by a server here whose owner was killed (-9)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self.user = getpass.getuser()
        self.port = port or _free_port()
        self.host_keys: dict[str, Path] = dict(host_keys or {})
        for t in host_key_types:
            if t not in self.host_keys:
                self.host_keys[t] = self._keygen(t)
        (self.dir / "authorized_keys").write_text("".join(k.strip() + "\n" for k in authorized_keys))
        os.chmod(self.dir / "authorized_keys", 0o600)
        self.config = self.dir / "sshd_config"
        self.config.write_text(self._config(force_command, env or {}, options or {}))
        self.log_path = self.dir / "sshd.log"
        self.proc: subprocess.Popen | None = None

    def _keygen(self, keytype: str) -> Path:
        path = self.dir / f"ssh_host_{keytype}_key"
        if not path.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", keytype, "-N", "", "-C", f"mfctl-test-{keytype}", "-f", str(path)],
                           check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=30)
        return path

    def public_key(self, keytype: str) -> str:
        """``keytype base64`` of one host key (as in a known_hosts line after the host name)."""
        return " ".join(Path(str(self.host_keys[keytype]) + ".pub").read_text().split()[:2])

    def known_hosts_line(self, keytype: str, name: str | None = None) -> str:
        return f"{name or f'[127.0.0.1]:{self.port}'} {self.public_key(keytype)}"

    def _config(self, force_command: str | None, env: dict[str, str], options: dict[str, str]) -> str:
        lines = [
            f"Port {self.port}", "ListenAddress 127.0.0.1", "AddressFamily inet",
            *[f"HostKey {p}" for p in self.host_keys.values()],
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            f"AllowUsers {self.user}",
            "StrictModes no", "UsePAM no", "PubkeyAuthentication yes",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password", "PermitUserEnvironment no",
            "AllowAgentForwarding no", "AllowTcpForwarding no", "X11Forwarding no", "PermitTunnel no",
            "PrintMotd no", "PrintLastLog no", "UseDNS no", "MaxStartups 200:30:400", "MaxSessions 64",
            "LoginGraceTime 20", "LogLevel VERBOSE",
        ]
        # SHLVL=1: the session's shell counts itself level 2 and so skips ~/.bashrc, which bash sources
        # for a level-1 `bash -c` under sshd (SSH_CLIENT set); this machine's root .bashrc runs
        # `pyenv init` (~0.3 s a command), a cost of the test machine, not of a GPU host
        env = {"SHLVL": "1", **env}
        lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
        if force_command:
            lines.append(f"ForceCommand {force_command}")
        for key, value in options.items():  # replaces the default line (sshd takes a keyword's first value)
            lines = [ln for ln in lines if ln.split(" ", 1)[0].lower() != key.lower()] + [f"{key} {value}"]
        return "\n".join(lines) + "\n"

    def start(self) -> "OpenSSHServer":
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        check = subprocess.run([self.binary, "-t", "-f", str(self.config)], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"sshd refused its config {self.config}: {check.stderr.strip()}")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        # sshd -D writes no PidFile: this one lets a later mock or `mfctl mock down` stop an sshd
        # whose owner was killed with -9 (mfctl.mockctl.reap_stale_sshds)
        (self.dir / "sshd.pid").write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.settimeout(2)
                    if s.recv(64).startswith(b"SSH-2.0-OpenSSH"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"sshd did not answer on 127.0.0.1:{self.port} within {START_TIMEOUT_S:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        """Stop sshd and every connection it serves (each is a child of the listener in a session
        of its own, which SIGTERM to the listener alone would leave running: a client still
        connected would go on reaching a host that is gone)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            for pid in _children(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None
        (self.dir / "sshd.pid").unlink(missing_ok=True)

    def __enter__(self) -> "OpenSSHServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
