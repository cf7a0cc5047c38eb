"""Both SSH paths against a real OpenSSH sshd on 127.0.0.1 (mfctl.mock.openssh), compared with what
the real `ssh -o BatchMode=yes` does in the same case.

The server offers ed25519, ecdsa and rsa host keys; known_hosts files are written by the real
`ssh-keyscan` (-H hashed, -t one type). Covered: each key type alone, hashed and plain; accept-new
recording then strict use; an impostor sshd with another key type (CHANGED on libssh2 and paramiko,
never recorded); @revoked; @cert-authority; wildcard and negated patterns; a passphrase key; the
agent; a server that closes after its banner and sshd's MaxStartups; a session killed mid-command;
and `mfctl exec` end to end. Skips with the reason where OpenSSH is not installed.
"""

import os
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from mfctl.errors import UnreachableError
from mfctl.mock import openssh
from mfctl.transport import libssh2
from mfctl.transport.ssh import SSHPool, SSHTarget, connect
from support import PROTOTYPE, mfctl_cmd, wait_until

pytestmark = pytest.mark.timeout(120)

TYPE_NAME = {"ed25519": "ssh-ed25519", "ecdsa": "ecdsa-sha2-nistp256", "rsa": "ssh-rsa"}


def _need(*tools: str) -> None:
    why = openssh.unavailable_reason()
    if why:
        pytest.skip(why)
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed (Debian: apt-get install openssh-client)")


def _keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "mfctl-test", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, timeout=30)
    return path


class Peers:
    """The module's real sshd servers and client keys."""

    def __init__(self, d: Path):
        self.dir = d
        self.key = _keygen(d / "id_ed25519")
        self.pp_key = _keygen(d / "id_passphrase", "not-a-secret-of-any-host")
        self.other_key = _keygen(d / "id_unauthorized")
        auth = [(d / "id_ed25519.pub").read_text(), (d / "id_passphrase.pub").read_text()]
        self.sshd = openssh.OpenSSHServer(d / "sshd", authorized_keys=auth)  # ed25519, ecdsa, rsa
        self.impostor = openssh.OpenSSHServer(d / "impostor", authorized_keys=auth, host_key_types=("ecdsa",))
        self.user = self.sshd.user

    def start(self) -> "Peers":
        self.sshd.start()
        try:
            self.impostor.start()
        except BaseException:
            self.sshd.close()
            raise
        return self

    def close(self) -> None:
        self.sshd.close()
        self.impostor.close()


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    _need("ssh", "ssh-keyscan")
    p = Peers(tmp_path_factory.mktemp("openssh")).start()
    yield p
    p.close()


def keyscan(port: int, *args: str) -> str:
    """What the real ssh-keyscan writes for 127.0.0.1:port (``-H``: hashed, ``-t TYPE``)."""
    r = subprocess.run(["ssh-keyscan", "-p", str(port), *args, "127.0.0.1"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def scans(peers):
    """``scans[(hashed, keytype or None)]``: known_hosts text ssh-keyscan wrote for the module's sshd
    (-H or not; every key type, or one type's line of it) — two scans for the module."""
    out = {}
    for hashed in (True, False):
        text = keyscan(peers.sshd.port, *(["-H"] if hashed else []))
        out[(hashed, None)] = text
        for k, name in TYPE_NAME.items():
            [one] = [ln for ln in text.splitlines(keepends=True) if ln.split()[1] == name]
            out[(hashed, k)] = one
    return out


def target(peers: Peers, kh: Path, port: int | None = None, policy: str = "strict", **kw) -> SSHTarget:
    base = dict(name="gpu01", address="127.0.0.1", port=port or peers.sshd.port, user=peers.user,
                key_file=str(peers.key), agent=False, known_hosts=str(kh), host_key_policy=policy)
    base.update(kw)
    return SSHTarget(**base)


def via_libssh2(t: SSHTarget) -> tuple[str, str]:
    """The command path's session to ``t`` (TCP, key exchange, host key, authentication; no command:
    root's shell here reads a .bashrc that takes 0.2 s): ``("connected", host-key algorithm)``, or
    ``(the error, "")``."""
    try:
        s = libssh2.ExecSession(t, 5)
    except UnreachableError as e:
        return str(e), ""
    try:
        return "connected", s.session.methods(libssh2.S.LIBSSH2_METHOD_HOSTKEY)
    finally:
        s.close()


def via_paramiko(t: SSHTarget) -> tuple[str, str]:
    """The interactive path's connection to ``t``, as :func:`via_libssh2`."""
    try:
        c = connect(t, timeout=5)
    except UnreachableError as e:
        return str(e), ""
    try:
        return "connected", c.get_transport().host_key_type
    finally:
        c.close()


def run_libssh2(t: SSHTarget, argv: list[str]) -> str:
    """A command over the pool (libssh2): its stdout, or the host's error as UnreachableError words it."""
    with SSHPool([t], connect_timeout=5) as pool:
        r = pool.run(t.name, argv)
    return r.stdout if r.error is None else f"{t.name}: {r.error}"


_NO_SUBSYSTEM = "mfctl-test-no-such-subsystem"


def real_ssh(peers: Peers, kh: Path, port: int | None = None, strict: str = "yes", key: Path | None = None,
             command: tuple[str, ...] = ()):
    """The real client in the same case: (exit status, stderr). -F /dev/null: no system config
    (Debian's HashKnownHosts yes and friends). Without ``command`` it asks for a subsystem sshd does
    not have, after authenticating: that refusal counts as (0, "") — a login without a shell (root's
    .bashrc here takes 0.2 s of every command)."""
    r = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={strict}",
                        "-o", f"UserKnownHostsFile={kh}", "-o", "GlobalKnownHostsFile=/dev/null",
                        "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5", "-i", str(key or peers.key),
                        "-p", str(port or peers.sshd.port), "-l", peers.user, "127.0.0.1",
                        *(command or ("-s", _NO_SUBSYSTEM))],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if not command and r.returncode == 255 and r.stderr.endswith("subsystem request failed on channel 0\n"):
        return 0, r.stderr.removesuffix("subsystem request failed on channel 0\n")
    return r.returncode, r.stderr


# --- known_hosts as ssh writes it ----------------------------------------------------------------
@pytest.mark.parametrize("hashed", [True, False], ids=["hashed", "plain"])
@pytest.mark.parametrize("keytype, libssh2_alg, paramiko_alg", [
    ("ed25519", "ssh-ed25519", "ssh-ed25519"),
    ("ecdsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"),
    ("rsa", "rsa-sha2-512", "rsa-sha2-512"),  # an ssh-rsa key, signed with SHA-512 (RFC 8332)
])
def test_a_known_hosts_written_by_ssh_keyscan_for_one_key_type_works_on_both_stacks(
        peers, scans, tmp_path, keytype, libssh2_alg, paramiko_alg, hashed):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(hashed, keytype)])
    assert kh.read_text().startswith("|1|" if hashed else f"[127.0.0.1]:{peers.sshd.port} {TYPE_NAME[keytype]} ")
    if hashed:  # what ssh itself writes: ssh connects with it
        assert real_ssh(peers, kh) == (0, "")
    assert via_libssh2(target(peers, kh)) == ("connected", libssh2_alg)  # asked for the known type first
    assert via_paramiko(target(peers, kh)) == ("connected", paramiko_alg)


def test_accept_new_records_the_offered_key_then_strict_uses_it_like_ssh(peers, tmp_path):
    kh = tmp_path / "known_hosts"
    assert run_libssh2(target(peers, kh, policy="accept-new"), ["echo", "recorded"]) == "recorded\n"
    recorded = kh.read_text()
    # ed25519, the key real ssh records first (OpenSSH's order; libssh2's own would have shown ecdsa)
    assert recorded == peers.sshd.known_hosts_line("ed25519") + "\n"
    assert via_paramiko(target(peers, kh)) == ("connected", "ssh-ed25519")  # strict now
    assert run_libssh2(target(peers, kh), ["echo", "strict"]) == "strict\n"
    assert real_ssh(peers, kh, command=("echo", "ok")) == (0, "")  # the line mfctl wrote is one ssh reads
    kh2 = tmp_path / "kh_paramiko"
    assert via_paramiko(target(peers, kh2, policy="accept-new")) == ("connected", "ssh-ed25519")  # paramiko's first
    assert kh2.read_text() == peers.sshd.known_hosts_line("ed25519") + "\n" and kh.read_text() == recorded
    assert via_libssh2(target(peers, kh2)) == ("connected", "ssh-ed25519")


@pytest.mark.parametrize("policy, strict", [("strict", "yes"), ("accept-new", "accept-new")])
def test_an_impostor_with_another_key_type_is_changed_on_both_stacks_and_never_recorded(peers, tmp_path, policy, strict):
    """The host is known by its ed25519 key; an impostor at its address offers only a new ecdsa key."""
    port = peers.impostor.port
    name = f"[127.0.0.1]:{port}"
    kh = tmp_path / "known_hosts"
    kh.write_text(peers.sshd.known_hosts_line("ed25519", name) + "\n")  # the real host's key, under the address
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(kh)], check=True, capture_output=True, timeout=30)
    before = kh.read_text()
    assert before.startswith("|1|")  # hashed by ssh-keygen, as ssh writes it
    want = (f"gpu01: host key CHANGED for 127.0.0.1:{port} — refusing to connect: it offered its ECDSA key, and {kh} "
            f"lists another for {name} (ED25519); an impostor, or a reinstalled host: check it, then "
            f"ssh-keygen -f {kh} -R '{name}'")
    assert via_libssh2(target(peers, kh, port, policy)) == (want, "")
    assert via_paramiko(target(peers, kh, port, policy)) == (want, "")
    assert kh.read_text() == before
    rc, err = real_ssh(peers, kh, port, strict)
    assert rc == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in err and "Offending ED25519 key" in err


def test_a_revoked_key_is_refused_on_both_stacks_even_when_listed(peers, scans, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, "ed25519")] + f"@revoked * {peers.sshd.public_key('ed25519')}\n")
    want = (f"gpu01: host key REVOKED for 127.0.0.1:{peers.sshd.port} — refusing to connect: its ED25519 key is "
            f"marked @revoked at {kh}:2 (a stolen key may be in use)")
    for policy in ("strict", "accept-new"):
        assert via_libssh2(target(peers, kh, policy=policy)) == (want, "")
        assert via_paramiko(target(peers, kh, policy=policy)) == (want, "")
    rc, err = real_ssh(peers, kh)
    assert rc == 255 and "REVOKED HOST KEY DETECTED" in err
    # revoking one of a host's keys leaves the others: a host also known by ecdsa is asked for ecdsa
    # by both stacks (paramiko would prefer ed25519, libssh2 ecdsa), and real ssh does the same
    kh.write_text(kh.read_text() + peers.sshd.known_hosts_line("ecdsa") + "\n")
    assert via_libssh2(target(peers, kh)) == via_paramiko(target(peers, kh)) == ("connected", "ecdsa-sha2-nistp256")
    assert real_ssh(peers, kh) == (0, "")


def test_a_host_known_only_by_a_revoked_line_is_revoked_on_both_stacks_never_recorded(peers, tmp_path):
    """Only ``@revoked [host]:port ed25519…``: the revoked type is asked for, so both stacks say
    REVOKED, as ssh does (libssh2 used to take ecdsa first: "not in known_hosts", or, under
    accept-new, record the ecdsa key)."""
    kh = tmp_path / "known_hosts"
    kh.write_text(f"@revoked [127.0.0.1]:{peers.sshd.port} {peers.sshd.public_key('ed25519')}\n")
    before = kh.read_text()
    want = (f"gpu01: host key REVOKED for 127.0.0.1:{peers.sshd.port} — refusing to connect: its ED25519 key is "
            f"marked @revoked at {kh}:1 (a stolen key may be in use)")
    for policy in ("strict", "accept-new"):
        assert via_libssh2(target(peers, kh, policy=policy)) == (want, "")
        assert via_paramiko(target(peers, kh, policy=policy)) == (want, "")
    assert kh.read_text() == before
    rc, err = real_ssh(peers, kh, strict="accept-new")
    assert rc == 255 and "was revoked" in err


def test_cert_authority_lines_are_refused_naming_the_line_and_do_not_break_a_file(peers, scans, tmp_path):
    _keygen(tmp_path / "ca")
    ca_line = f"@cert-authority [127.0.0.*]:* {' '.join((tmp_path / 'ca.pub').read_text().split()[:2])}\n"
    kh = tmp_path / "known_hosts"
    kh.write_text("# the site's host CA\n" + ca_line)
    want = (f"gpu01: {kh}:2 vouches for [127.0.0.1]:{peers.sshd.port} by @cert-authority (host certificates), which "
            f"mfctl does not check — refusing to connect: list the host's own key in {kh} "
            f"(ssh-keyscan -p {peers.sshd.port} 127.0.0.1)")
    for policy in ("strict", "accept-new"):
        assert via_libssh2(target(peers, kh, policy=policy)) == (want, "")
        assert via_paramiko(target(peers, kh, policy=policy)) == (want, "")
    assert kh.read_text() == "# the site's host CA\n" + ca_line  # accept-new did not trust past the CA
    rc, err = real_ssh(peers, kh)  # (real ssh, strict: the sshd has no certificate, so the host is unknown)
    assert rc == 255 and "host key is known" in err
    # markers with keys paramiko's own loader cannot decode ("Incorrect padding") beside the host's key
    kh.write_text(ca_line + "@cert-authority *.example ssh-ed25519 AAAAC3Nza\n@revoked * ssh-rsa AAAAB3Nz=x\n"
                  + scans[(False, "ed25519")])
    assert via_paramiko(target(peers, kh)) == ("connected", "ssh-ed25519")
    assert via_libssh2(target(peers, kh)) == ("connected", "ssh-ed25519")


@pytest.mark.parametrize("hosts, known", [
    ("[127.0.0.*]:{port}", True),
    ("[127.0.0.?]:{port}", True),
    ("*", True),
    ("[127.0.0.1]:*,!gpu99", True),
    ("127.0.0.1", True),  # another port: looked up without it too (OpenSSH's fallback)
    ("*,![127.0.0.1]:{port},!127.0.0.1", False),  # negations exclude the line
    ("!*,[127.0.0.1]:{port}", False),
    ("[127.0.0.1]:{port}9", False),
])
def test_wildcard_and_negated_patterns_match_as_real_ssh_does(peers, tmp_path, hosts, known):
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{hosts.format(port=peers.sshd.port)} {peers.sshd.public_key('ed25519')}\n")
    rc, _ = real_ssh(peers, kh)
    assert (rc == 0) is known
    unknown = (f"gpu01: host key of [127.0.0.1]:{peers.sshd.port} is not in {kh} "
               "(add it, or set host_key_policy: accept-new)")
    assert via_libssh2(target(peers, kh)) == (("connected", "ssh-ed25519") if known else (unknown, ""))
    assert via_paramiko(target(peers, kh)) == (("connected", "ssh-ed25519") if known else (unknown, ""))


# --- authentication ------------------------------------------------------------------------------
def test_a_passphrase_key_and_a_refused_key_are_named_on_both_stacks(peers, scans, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    want = (f"gpu01: SSH key {peers.pp_key} is protected by a passphrase, and mfctl never asks for one: load it into "
            f"the SSH agent (ssh-add {peers.pp_key}) and remove key_file (the agent is used when no key_file is set)")
    assert via_libssh2(target(peers, kh, key_file=str(peers.pp_key)))[0] == want
    assert via_paramiko(target(peers, kh, key_file=str(peers.pp_key)))[0] == want
    assert real_ssh(peers, kh, key=peers.pp_key)[0] == 255  # BatchMode: ssh does not ask either
    refused = (f"gpu01: SSH to 127.0.0.1:{peers.sshd.port} failed: authentication as {peers.user} refused: the server "
               f"accepts none of the key {peers.other_key}; is the public key in its authorized_keys?")
    assert via_libssh2(target(peers, kh, key_file=str(peers.other_key)))[0] == refused
    assert via_paramiko(target(peers, kh, key_file=str(peers.other_key)))[0] == refused


def test_the_agent_without_the_key_or_without_an_agent_is_named_on_both_stacks(peers, scans, tmp_path, monkeypatch):
    _need("ssh-agent", "ssh-add")
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(sock.exists, timeout=10, what="ssh-agent's socket")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(peers.other_key)], check=True, env=env, timeout=10,
                       stdin=subprocess.DEVNULL, capture_output=True)
        t = target(peers, kh, key_file=None, agent=True)
        refused = (f"gpu01: SSH to 127.0.0.1:{peers.sshd.port} failed: authentication as {peers.user} refused: the "
                   "server accepts none of the SSH agent's keys (ssh-add -l lists them); is the public key in its "
                   "authorized_keys?")
        assert via_libssh2(t)[0] == refused  # was "('No identities match for user %s', b'root')"
        assert via_paramiko(t)[0] == refused
        subprocess.run(["ssh-add", "-q", str(peers.key)], check=True, env=env, timeout=10,
                       stdin=subprocess.DEVNULL, capture_output=True)
        assert via_libssh2(t)[0] == via_paramiko(t)[0] == "connected"
    finally:
        agent.terminate()
        agent.wait(10)
    monkeypatch.delenv("SSH_AUTH_SOCK")
    none = (f"gpu01: SSH to 127.0.0.1:{peers.sshd.port} failed: no credential to offer for {peers.user}: no SSH agent "
            "with a key answers (SSH_AUTH_SOCK unset, its agent gone, or ssh-add -l lists no key) and the inventory "
            "names no key_file for this host")
    t = target(peers, kh, key_file=None, agent=True)
    assert via_libssh2(t)[0] == via_paramiko(t)[0] == none


# --- servers that close, sessions that die -------------------------------------------------------
class _BannerThenClose:
    """A TCP server that sends an OpenSSH banner and closes (what a dying or throttling sshd does)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10\r\n")
                c.recv(256)  # the client's banner, then goodbye

    def close(self):
        self.sock.close()


def test_a_server_that_closes_after_its_banner_or_before_it_is_named_on_both_stacks(peers, scans, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    srv = _BannerThenClose()
    try:
        want = (f"gpu01: SSH to 127.0.0.1:{srv.port} failed: {libssh2.CLOSED_IN_KEX}")
        assert via_libssh2(target(peers, kh, srv.port))[0] == want  # was "SSH2Error"
        assert via_paramiko(target(peers, kh, srv.port))[0] == want  # was "cannot connect …: Connection reset by peer"
        assert real_ssh(peers, kh, srv.port)[0] == 255
    finally:
        srv.close()
    # sshd's MaxStartups: one unauthenticated connection held, the next one dropped before the banner
    d = tmp_path / "throttled"
    throttled = openssh.OpenSSHServer(d, authorized_keys=[(peers.dir / "id_ed25519.pub").read_text()],
                                      host_keys=dict(peers.sshd.host_keys), options={"MaxStartups": "1"}).start()
    try:
        def hold():  # (start()'s own probe holds the one slot until its sshd child has gone)
            c = socket.create_connection(("127.0.0.1", throttled.port), timeout=5)
            if c.recv(64).startswith(b"SSH-2.0-OpenSSH"):
                return c
            c.close()
            return None

        held = wait_until(hold, timeout=10, what="an unauthenticated connection holding MaxStartups' one slot")
        want = f"gpu01: SSH to 127.0.0.1:{throttled.port} failed: {libssh2.CLOSED_BEFORE_BANNER}"
        kh.write_text(peers.sshd.known_hosts_line("ed25519", f"[127.0.0.1]:{throttled.port}") + "\n")
        assert via_libssh2(target(peers, kh, throttled.port))[0] == want  # sshd said "Exceeded MaxStartups"
        assert via_paramiko(target(peers, kh, throttled.port))[0] == want
        rc, err = real_ssh(peers, kh, throttled.port)
        assert rc == 255 and "kex_exchange_identification" in err
        held.close()
        assert "past MaxStartups" in throttled.log_tail(50)
    finally:
        throttled.close()


def _session_processes_running(needle: bytes) -> list[int]:
    """pids of sshd session processes (children of a listening sshd) with ``needle`` in a descendant's command line."""
    parent = {}
    cmd = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd[int(d.name)] = (d / "cmdline").read_bytes()
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out = set()
    for pid, c in cmd.items():
        if needle in c:
            p = parent.get(pid)
            while p and p in cmd:
                if cmd[p].startswith(b"sshd:") and b"@" in cmd[p]:
                    out.add(p)
                p = parent.get(p)
    return sorted(out)


def test_a_session_killed_mid_command_is_a_result_naming_the_endpoint(peers, scans, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    t = target(peers, kh)
    box = {}
    with SSHPool([t], connect_timeout=5) as pool:
        th = threading.Thread(target=lambda: box.setdefault("r", pool.run("gpu01", ["sleep", "30.125"], timeout=20)))
        th.start()
        pids = wait_until(lambda: _session_processes_running(b"30.125"), timeout=10, what="the command's sshd session")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        th.join(10)
    r = box["r"]
    assert r.rc is None and r.exit_code == 4 and r.elapsed_s < 10
    assert r.error == (f"SSH error: the connection to 127.0.0.1:{peers.sshd.port} was lost while the command ran (the "
                       "server closed it: its sshd session ended, sshd restarted, or the host went down); the "
                       "command's outcome is unknown")  # was "SSH error: SocketRecvError"


@pytest.mark.parametrize("script, rc", [("kill -TERM $$", 143), ("kill -KILL $$", 137), ("exit 3", 3), ("true", 0)])
def test_a_command_killed_by_a_signal_reads_128_plus_n_not_0(peers, scans, tmp_path, script, rc):
    """OpenSSH sends exit-signal and no exit-status for a command a signal killed; libssh2 then
    says 0 (ssh2-python never returns the signal's name): SSHPool reads the name from libssh2."""
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    with SSHPool([target(peers, kh)], connect_timeout=5) as pool:
        r = pool.run("gpu01", ["sh", "-c", script], timeout=20)
    assert (r.rc, r.error) == (rc, None)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def test_a_pooled_session_sshd_dropped_while_idle_is_replaced_once_not_reported(peers, scans, tmp_path):
    """sshd restarted, ClientAliveInterval or a firewall's idle timeout: the next command was never
    sent, so the pool connects again and sends it (it used to fail as "lost while the command ran")."""
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, None)])
    with SSHPool([target(peers, kh)], connect_timeout=5) as pool:
        assert pool.run("gpu01", ["echo", "one"]).stdout == "one\n"
        first = pool._exec["gpu01"]
        sessions = wait_until(lambda: _children(peers.sshd.proc.pid), timeout=10, what="the pooled session's sshd")
        for pid in sessions:  # (the module's sshd serves no one else now)
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _children(peers.sshd.proc.pid), timeout=10, what="the session's sshd to go")
        r = pool.run("gpu01", ["echo", "two"])
        assert (r.stdout, r.error) == ("two\n", None) and pool._exec["gpu01"] is not first


# --- mfctl exec, end to end ----------------------------------------------------------------------
def test_mfctl_exec_over_real_openssh_with_a_known_hosts_ssh_wrote(peers, scans, tmp_path, cli_env):
    kh = tmp_path / "known_hosts"
    kh.write_text(scans[(True, "ed25519")])  # one hashed ed25519 line: what ssh writes
    doc = yaml.safe_load(PROTOTYPE.read_text())
    doc["ssh"] = {"known_hosts": str(kh), "host_key_policy": "strict"}
    for h in doc["hosts"]:
        h["ssh"] = {"address": "127.0.0.1", "port": peers.sshd.port, "user": peers.user, "key_file": str(peers.key),
                    "agent": False}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(doc))
    r = subprocess.run(mfctl_cmd("exec", "-i", inv, "gpu[01-02]", "--", "echo", "over", "openssh"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert (r.returncode, r.stdout.splitlines()) == (0, ["---- gpu[01-02] (rc=0) ----", "over openssh"]), r.stderr
    for h in doc["hosts"]:  # the impostor at every host's address
        h["ssh"]["port"] = peers.impostor.port
    inv.write_text(yaml.safe_dump(doc))
    kh.write_text(peers.sshd.known_hosts_line("ed25519", f"[127.0.0.1]:{peers.impostor.port}") + "\n")
    r = subprocess.run(mfctl_cmd("exec", "-i", inv, "gpu[01-02]", "--", "true"), capture_output=True, text=True,
                       env=cli_env, timeout=60)
    assert r.returncode == 4 and r.stdout.splitlines() == [
        f"---- gpu[01-02] (error: host key CHANGED for <address>:<port> — refusing to connect: it offered its ECDSA "
        f"key, and {kh} lists another for <address>:<port> (ED25519); an impostor, or a reinstalled host: check it, "
        f"then ssh-keygen -f {kh} -R '<address>:<port>') ----"], (r.stdout, r.stderr)
