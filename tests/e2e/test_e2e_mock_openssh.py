"""The mock's hosts behind a real OpenSSH sshd (``mock.sshd: openssh``): the banner and the sshd's
own log say it is OpenSSH; known_hosts lists every host key it offers (as ``ssh-keyscan`` sees
them); exit codes, stderr, stdin, large output and a pty's ^C cross the relay intact; closing the
session stops a long command and its relay (no orphan); and ``mock.sshd: paramiko`` still works.
One OpenSSH mock for the module (``mfctl.mockctl.start``); skipped where sshd is not installed."""

import json
import os
import select
import shutil
import socket
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.mock import openssh
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import PROTOTYPE, live_processes, mfctl_cmd, wait_until

pytestmark = pytest.mark.skipif(openssh.unavailable_reason() is not None, reason=str(openssh.unavailable_reason()))


@pytest.fixture(scope="module")
def omock(tmp_path_factory):
    """(status, inventory, pool, state env): one mock served by real sshds; its processes carry
    ``MFCTL_STATE_DIR`` = the state env's (a test sets it to scan them with live_processes)."""
    root = tmp_path_factory.mktemp("omock")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MFCTL_STATE_DIR", str(root / "state"))
        st = mockctl.start(PROTOTYPE, root / "mock", time_scale=100, sshd="openssh")
    inv = load_inventory(st["inventory"])
    pool = SSHPool(targets_from_inventory(inv))
    yield st, inv, pool, str(root / "state")
    pool.close()
    assert mockctl.stop(root / "mock")


def banner(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        return s.recv(256)


def paramiko_client(inv, host: str) -> paramiko.SSHClient:
    t = next(h.ssh for h in inv.hosts if h.name == host)
    c = paramiko.SSHClient()
    c.load_host_keys(inv.ssh.known_hosts)
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    c.connect(t.address, t.port, username=t.user, key_filename=t.key_file, look_for_keys=False, allow_agent=False,
              timeout=10)
    return c


def test_the_hosts_are_openssh_and_the_sshd_log_shows_the_session(omock):
    st, inv, pool, _ = omock
    assert st["sshd"] == "openssh"
    port = st["hosts"]["gpu02"]["port"]
    assert banner(port).startswith(b"SSH-2.0-OpenSSH_")
    r = pool.run("gpu02", ["hostname"])
    assert (r.rc, r.stdout, r.stderr) == (0, "gpu02\n", "")
    log = Path(st["hosts"]["gpu02"]["sshd_log"]).read_text()
    user = next(h.ssh.user for h in inv.hosts if h.name == "gpu02")
    assert f"Accepted publickey for {user} from 127.0.0.1" in log
    assert "Starting session: forced-command (config)" in log and "mfctl/mock/relay.py --socket" in log
    # the relay's socket: only its owner may connect, in the 0700 state directory
    sock = Path(st["state_dir"]) / "hosts" / "gpu02.sock"
    assert oct(sock.stat().st_mode & 0o777) == "0o600" and oct(sock.parent.parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.skipif(shutil.which("ssh-keyscan") is None, reason="ssh-keyscan is not installed (Debian: apt-get install "
                    "openssh-client)")
def test_known_hosts_lists_every_host_key_the_sshd_offers(omock):
    st, inv, _, _ = omock
    port = st["hosts"]["gpu03"]["port"]
    scan = subprocess.run(["ssh-keyscan", "-p", str(port), "-T", "5", "127.0.0.1"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    offered = {tuple(line.split()[:3]) for line in scan.splitlines() if line and not line.startswith("#")}
    filed = {tuple(line.split()[:3]) for line in Path(inv.ssh.known_hosts).read_text().splitlines()
             if line.startswith(f"[127.0.0.1]:{port} ")}
    assert {k for _, k, _ in offered} == {"ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"}
    assert filed == offered


def test_exit_codes_stderr_stdin_and_large_output_cross_intact(omock):
    st, _, pool, _ = omock
    r = pool.run("gpu01", ["false"])
    assert (r.rc, r.stdout, r.stderr) == (1, "", "")
    r = pool.run("gpu01", ["nosuch", "--flag"])
    assert (r.rc, r.stdout, r.stderr) == (127, "", "bash: line 1: nosuch: command not found\n")
    r = pool.run("gpu01", ["nvidia-smi", "-i", "9", "-q"])  # the tool's own code and message, on stdout
    assert r.rc == 6 and r.stdout.startswith("No devices were found") and r.stderr == ""
    data = os.urandom(300_000) + b"\n"  # binary: every byte value, more than one relay frame
    r = pool.run("gpu01", ["sh", "-c", "umask 077 && cat > stdin-check.bin"], stdin=data)
    assert (r.rc, r.stderr) == (0, "")
    home = Path(st["state_dir"]) / "home"
    assert (home / "stdin-check.bin").read_bytes() == data
    r = pool.run("gpu01", ["head", "-c", "3M", "/dev/zero"])
    assert r.rc == 0 and len(r.stdout) == 3 << 20 and set(r.stdout) == {"\0"}


def _tail_session(inv, host, target: Path, pty: bool):
    c = paramiko_client(inv, host)
    chan = c.get_transport().open_session(timeout=10)
    if pty:
        chan.get_pty(term="dumb", width=200)
    chan.exec_command(f"tail -F {target}")
    return c, chan


@pytest.mark.parametrize("pty", [False, True], ids=["pipes", "pty"])
def test_closing_the_session_stops_a_long_command_and_its_relay(omock, monkeypatch, tmp_path, pty):
    st, inv, _, state = omock
    monkeypatch.setenv("MFCTL_STATE_DIR", state)  # live_processes: the mock's processes, not another test's
    target = tmp_path / "follow.log"
    target.write_text("first line\n")
    c, chan = _tail_session(inv, "gpu04", target, pty)
    needle = str(target).encode()  # (a command line's words are NUL-separated in /proc)
    try:
        wait_until(lambda: chan.recv_ready() and b"first line" in chan.recv(4096), what="tail's first line")
        assert len(live_processes(needle)) == 1
        assert len(wait_until(lambda: live_processes(b"gpu04.sock"), what="the relay process")) == 1
    finally:
        c.close()  # the client goes away (no exit from the command)
    wait_until(lambda: not live_processes(needle), timeout=10, what="tail to end with its session")
    wait_until(lambda: not live_processes(b"gpu04.sock"), timeout=10, what="the relay to end with its session")


def test_ctrl_c_on_a_pty_reaches_the_command_which_dies_of_sigint(omock, monkeypatch, tmp_path):
    """^C on the session's terminal: the relay gets SIGINT (the tty's), the mock signals the command,
    and the relay dies of the same signal, so sshd reports exit-signal INT, not an exit status."""
    st, inv, _, state = omock
    monkeypatch.setenv("MFCTL_STATE_DIR", state)
    target = tmp_path / "follow.log"
    target.write_text("ready\n")
    c, chan = _tail_session(inv, "gpu03", target, pty=True)
    try:
        wait_until(lambda: chan.recv_ready() and b"ready" in chan.recv(4096), what="tail's first line")
        chan.sendall(b"\x03")
        t0 = time.monotonic()
        assert chan.status_event.wait(10) and time.monotonic() - t0 < 5
        assert chan.recv_exit_status() == -1  # paramiko: no exit-status came (exit-signal instead)
    finally:
        c.close()
    assert not live_processes(str(target).encode())
    wait_until(lambda: "Close session: user" in Path(st["hosts"]["gpu03"]["sshd_log"]).read_text(),
               what="sshd to log the session's end")


def test_openssh_s_own_client_gets_the_same_output_exit_codes_and_stderr(omock):
    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH's ssh is not installed (Debian: apt-get install openssh-client)")
    st, inv, _, _ = omock
    h = next(h for h in inv.hosts if h.name == "gpu01")
    base = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={inv.ssh.known_hosts}", "-o",
            "StrictHostKeyChecking=yes", "-i", h.ssh.key_file, "-p", str(h.ssh.port), f"{h.ssh.user}@127.0.0.1"]
    r = subprocess.run(base + ["hostname"], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, "gpu01\n"), r.stderr
    r = subprocess.run(base + ["nosuch"], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stderr) == (127, "bash: line 1: nosuch: command not found\n")


def test_the_cli_chooses_paramiko_by_flag_and_refuses_an_unknown_choice(tmp_path, cli_env):
    sd = tmp_path / "pmock"
    r = subprocess.run(mfctl_cmd("mock", "up", PROTOTYPE, "--state-dir", sd, "--time-scale", 100, "--sshd", "paramiko",
                                 "--json"), capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        st = json.loads(r.stdout)
        assert st["sshd"] == "paramiko" and "sshd_log" not in st["hosts"]["gpu01"]
        assert banner(st["hosts"]["gpu01"]["port"]).startswith(b"SSH-2.0-paramiko")
        r = subprocess.run(mfctl_cmd("exec", "-i", st["inventory"], "gpu01,gpu04", "--", "hostname"),
                           capture_output=True, text=True, env=cli_env, timeout=60)
        assert r.returncode == 0 and "gpu01\n" in r.stdout and "gpu04\n" in r.stdout, r.stderr
    finally:
        subprocess.run(mfctl_cmd("mock", "down", "--state-dir", sd), env=cli_env, timeout=60, capture_output=True)
    r = subprocess.run(mfctl_cmd("mock", "up", PROTOTYPE, "--state-dir", tmp_path / "bad", "--json"),
                       capture_output=True, text=True, env={**cli_env, "MFCTL_MOCK_SSHD": "dropbear"}, timeout=60)
    assert r.returncode == 2  # a usage error, before anything starts (the option takes the variable)
    assert json.loads(r.stdout)["error"]["message"] == ("--sshd (MFCTL_MOCK_SSHD) must be one of auto, openssh, "
                                                        "paramiko, got 'dropbear'")


def test_an_injected_refusal_closes_connections_before_the_banner(tmp_path, cli_env):
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, sshd="openssh", inject=["gpu03:ssh=refuse"])
    try:
        assert banner(st["hosts"]["gpu03"]["port"]) == b""
        assert banner(st["hosts"]["gpu02"]["port"]).startswith(b"SSH-2.0-OpenSSH_")
        r = subprocess.run(mfctl_cmd("exec", "-i", st["inventory"], "gpu02,gpu03", "--", "hostname"),
                           capture_output=True, text=True, env=cli_env, timeout=60)
        assert r.returncode == 4 and "gpu02\n" in r.stdout, (r.stdout, r.stderr)
    finally:
        mockctl.stop(tmp_path / "mock")


def _relay_pids(socket_path: str) -> list[int]:
    """Pids of the relays sshd started for sessions on the mock host of ``socket_path``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(c.endswith(b"relay.py") for c in cmd) and socket_path.encode() in cmd:
                out.append(int(d.name))
    return out


def _kill_the_relay_under(omock, host: str, start, tmp_path):
    """Start a ``tail -F`` on ``host`` with ``start(argv)``, SIGTERM its relay (as a real host's
    command killed by a signal), return what ``start`` returned once it is done."""
    st, _, _, _ = omock
    target = tmp_path / "follow.log"
    target.write_text("x\n")
    sock = str(Path(st["state_dir"]) / "hosts" / f"{host}.sock")
    before = set(_relay_pids(sock))
    finish = start(["tail", "-F", str(target)])
    (pid,) = wait_until(lambda: set(_relay_pids(sock)) - before, what="the session's relay")
    wait_until(lambda: live_processes(str(target).encode()), what="tail to run")  # (MFCTL_STATE_DIR: the mock's)
    os.kill(pid, 15)
    return finish()


def test_a_command_killed_by_a_signal_is_exit_signal_as_openssh_sends_it(omock, monkeypatch, tmp_path):
    """OpenSSH reports a command killed by a signal with exit-signal and no exit-status: its own
    client exits 255 (the paramiko mock said 128 + N, as a shell would)."""
    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH's ssh is not installed (Debian: apt-get install openssh-client)")
    st, inv, _, state = omock
    monkeypatch.setenv("MFCTL_STATE_DIR", state)
    h = next(h for h in inv.hosts if h.name == "gpu02")

    def start(argv):
        p = subprocess.Popen(["ssh", "-v", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={inv.ssh.known_hosts}", "-o",
                              "StrictHostKeyChecking=yes", "-i", h.ssh.key_file, "-p", str(h.ssh.port),
                              f"{h.ssh.user}@127.0.0.1", " ".join(argv)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert select.select([p.stdout], [], [], 20)[0], "no output from tail within 20 s"
        first = p.stdout.readline()  # tail's output has crossed before its relay is killed

        def finish():
            out, err = p.communicate(timeout=30)
            return (first + out, err), p.returncode
        return finish

    (out, err), rc = _kill_the_relay_under(omock, "gpu02", start, tmp_path)
    assert (rc, out) == (255, "x\n")
    assert "rtype exit-signal" in err and "rtype exit-status" not in err


def test_sshpool_reads_a_command_killed_by_a_signal_as_128_plus_n(omock, monkeypatch, tmp_path):
    import threading

    st, inv, pool, state = omock
    monkeypatch.setenv("MFCTL_STATE_DIR", state)

    def start(argv):
        res: dict = {}
        t = threading.Thread(target=lambda: res.setdefault("r", pool.run("gpu01", argv, timeout=30)))
        t.start()
        return lambda: (t.join(35), res["r"])[1]

    r = _kill_the_relay_under(omock, "gpu01", start, tmp_path)
    assert (r.rc, r.error) == (128 + 15, None), r  # SIGTERM: exit-signal read from libssh2: 128 + N, as a shell says


def test_the_suite_s_mock_is_openssh_unless_told_otherwise(mock_testbed, cli_env):
    """The session's mock (``mfctl mock up``, ``mock.sshd`` auto) is real OpenSSH where it is
    installed: ``mfctl exec`` on every host is one more session in each host's sshd log."""
    wanted = os.environ.get("MFCTL_MOCK_SSHD") or "auto"
    assert mock_testbed.status["sshd"] == ("paramiko" if wanted == "paramiko" else "openssh")
    if wanted == "paramiko":
        return
    logs = {h: Path(e["sshd_log"]) for h, e in mock_testbed.status["hosts"].items()}
    before = {h: p.read_text().count("Starting session: forced-command") for h, p in logs.items()}
    r = subprocess.run(mfctl_cmd("exec", "-i", mock_testbed.inventory, "all", "--json", "--", "hostname"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: all(p.read_text().count("Starting session: forced-command") == before[h] + 1
                           for h, p in logs.items()), what="one more session in every host's sshd log")


def test_a_command_that_ends_as_its_stdin_ends_keeps_its_output_and_status(omock):
    """ssh sends EOF on stdin as the command ends: the relay's EOF frame then meets a mock that has
    sent the last frames and closed (EPIPE) — not a hang-up: the output and exit status still arrive
    (was: 2–6 % of parallel sessions exit 129 with no output)."""
    from concurrent.futures import ThreadPoolExecutor

    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH's ssh is not installed (Debian: apt-get install openssh-client)")
    st, inv, _, _ = omock
    h = next(h for h in inv.hosts if h.name == "gpu01")
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={inv.ssh.known_hosts}", "-o",
            "StrictHostKeyChecking=yes", "-i", h.ssh.key_file, "-p", str(h.ssh.port), f"{h.ssh.user}@127.0.0.1",
            "nvidia-smi -L"]

    def once(_):
        r = subprocess.run(argv, input=b"", capture_output=True, timeout=60)
        return r.returncode, r.stdout.count(b"GPU ")

    with ThreadPoolExecutor(12) as ex:
        outcomes = list(ex.map(once, range(100)))
    assert [o for o in outcomes if o != (0, 8)] == []


def test_the_sshds_of_a_mock_killed_with_9_are_stopped_by_mock_down_and_by_the_next_mock(tmp_path, monkeypatch):
    """The hosts' sshds run in sessions of their own: a mock killed with -9 cannot stop them, so
    `mfctl mock down` (and a new mock in the same directory) stop them by their pid files."""
    import signal

    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state"))
    sd = tmp_path / "mock"

    def sshds() -> list[str]:  # (sshd rewrites its title over its environment: live_processes cannot see it)
        found = []
        for d in Path("/proc").iterdir():
            try:
                line = (d / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"sshd" in line and str(sd / "hosts").encode() in line and b"[listener]" in line:
                found.append(d.name)
        return found

    st = mockctl.start(PROTOTYPE, sd, time_scale=100, sshd="openssh")
    os.kill(st["pid"], signal.SIGKILL)
    assert wait_until(lambda: len(sshds()) == 4, timeout=5, what="the 4 orphaned sshds")
    mockctl.stop(sd)
    assert wait_until(lambda: not sshds(), timeout=5, what="no sshd left"), sshds()
    # killed again, and a new mock started in the same directory: only its own 4 sshds remain
    old = mockctl.start(PROTOTYPE, sd, time_scale=100, sshd="openssh")
    os.kill(old["pid"], signal.SIGKILL)
    assert wait_until(lambda: len(sshds()) == 4, timeout=5, what="the 4 orphaned sshds")
    orphans = set(sshds())
    (sd / "status.json").unlink()
    mockctl.start(PROTOTYPE, sd, time_scale=100, sshd="openssh")
    try:
        assert wait_until(lambda: len(sshds()) == 4, timeout=5, what="the new mock's sshds alone")
    finally:
        assert mockctl.stop(sd)
    assert wait_until(lambda: not sshds(), timeout=5, what="no sshd left"), sshds()
    assert len(orphans) == 4
