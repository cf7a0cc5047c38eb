"""SSH to mock hosts: strict host keys, accept-new opt-in, quoting, timeouts, results as data."""

import shlex

import paramiko
import pytest

from mfctl.errors import UnreachableError
from mfctl.mock.sshd import MockSSHServer
from mfctl.transport.ssh import SSHPool, SSHTarget, connect, quote_argv


@pytest.fixture
def server(tmp_path):
    hk = paramiko.ECDSAKey.generate(bits=256)
    ck = paramiko.ECDSAKey.generate(bits=256)
    kf = tmp_path / "id"
    ck.write_private_key_file(str(kf))
    seen = []

    def on_exec(cmd, chan):
        seen.append(cmd)
        argv = shlex.split(cmd)
        if argv[0] == "echo":
            chan.sendall((" ".join(argv[1:]) + "\n").encode())
            return 0
        if argv[0] == "sleep":
            import time
            time.sleep(float(argv[1]))
            return 0
        chan.sendall_stderr(f"bash: {argv[0]}: command not found\n".encode())
        return 127

    srv = MockSSHServer("h1", hk, users={"ops"}, authorized_keys=[ck], on_exec=on_exec)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n")
    yield srv, SSHTarget(name="h1", address="127.0.0.1", port=srv.port, user="ops", key_file=str(kf), agent=False,
                         known_hosts=str(kh)), seen, hk
    srv.close()


def test_results_are_data_and_words_are_quoted(server):
    srv, target, seen, _ = server
    hostile = "a b; rm -rf / $(reboot) `id` 'q\""
    with SSHPool([target]) as pool:
        r = pool.run("h1", ["echo", hostile])
        assert r.ok and r.rc == 0 and r.stdout == hostile + "\n"
        assert shlex.split(seen[-1]) == ["echo", hostile]  # one word on the far side, nothing injected
        bad = pool.run("h1", ["nosuchtool", "x"])
        assert bad.rc == 127 and not bad.ok and "command not found" in bad.stderr and bad.error is None
        slow = pool.run("h1", ["sleep", "2"], timeout=0.3)
        assert slow.error and "timeout" in slow.error and not slow.ok
    assert quote_argv(["a", "b c", "$(x)"]) == "a 'b c' '$(x)'"


def test_unknown_host_key_is_refused_by_default(server, tmp_path):
    srv, target, _, _ = server
    empty = tmp_path / "empty"
    empty.write_text("")
    target.known_hosts = str(empty)
    with pytest.raises(UnreachableError, match="not in"):
        connect(target, timeout=3)
    with SSHPool([target]) as pool:  # through the pool it is data, not an exception
        r = pool.run("h1", ["echo", "x"])
        assert not r.ok and "host_key_policy: accept-new" in r.error


def test_accept_new_records_the_key_and_changed_key_is_refused(server, tmp_path):
    srv, target, _, hk = server
    kh = tmp_path / "kh_new"
    target.known_hosts, target.host_key_policy = str(kh), "accept-new"
    connect(target, timeout=3).close()
    assert hk.get_base64() in kh.read_text()
    other = paramiko.ECDSAKey.generate(bits=256)
    kh.write_text(f"[127.0.0.1]:{srv.port} {other.get_name()} {other.get_base64()}\n")
    with pytest.raises(UnreachableError, match="CHANGED"):
        connect(target, timeout=3)


def test_connection_refused_is_unreachable():
    t = SSHTarget(name="nowhere", address="127.0.0.1", port=1)
    with pytest.raises(UnreachableError) as e:
        connect(t, timeout=2)
    assert e.value.exit_code == 4 and "127.0.0.1:1" in str(e.value)


# --- the command path (libssh2) checks host keys like the paramiko path --------------------------
def test_pool_commands_accept_new_record_hashed_entries_match_and_changed_keys_are_refused(server, tmp_path):
    srv, target, _, hk = server
    kh = tmp_path / "kh_pool"
    target.known_hosts, target.host_key_policy = str(kh), "accept-new"
    with SSHPool([target]) as pool:
        assert pool.run("h1", ["echo", "first"]).stdout == "first\n"
    assert kh.read_text() == f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n"
    # an OpenSSH-hashed entry (HashKnownHosts yes) for the same key is recognised
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{srv.port}")
    kh.write_text(f"{hashed} {hk.get_name()} {hk.get_base64()}\n")
    target.host_key_policy = "strict"
    with SSHPool([target]) as pool:
        assert pool.run("h1", ["echo", "hashed"]).ok
    other = paramiko.ECDSAKey.generate(bits=256)
    kh.write_text(f"[127.0.0.1]:{srv.port} {other.get_name()} {other.get_base64()}\n")
    for policy in ("strict", "accept-new"):  # a changed key is refused under both policies
        target.host_key_policy = policy
        with SSHPool([target]) as pool:
            r = pool.run("h1", ["echo", "x"])
            assert not r.ok and "CHANGED" in r.error
    assert other.get_base64() in kh.read_text() and hk.get_base64() not in kh.read_text()


def test_pool_commands_big_output_on_both_streams_stdin_and_recovery_after_a_timeout(tmp_path):
    """Megabytes on stdout and stderr at once do not deadlock; stdin reaches the command;
    after a timeout the next command gets a fresh session."""
    hk, ck = paramiko.ECDSAKey.generate(bits=256), paramiko.ECDSAKey.generate(bits=256)
    kf = tmp_path / "id"
    ck.write_private_key_file(str(kf))

    def on_exec(cmd, chan):
        argv = shlex.split(cmd)
        if argv[0] == "both":
            for _ in range(64):
                chan.sendall_stderr(b"e" * 65536)
                chan.sendall(b"o" * 65536)
            return 3
        if argv[0] == "cat":
            data = bytearray()
            while d := chan.recv(65536):
                data += d
            chan.sendall(bytes(data[::-1]))
            return 0
        if argv[0] == "sleep":
            import time
            time.sleep(float(argv[1]))
        return 0

    srv = MockSSHServer("h2", hk, users={"ops"}, authorized_keys=[ck], on_exec=on_exec)
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n")
    t = SSHTarget(name="h2", address="127.0.0.1", port=srv.port, user="ops", key_file=str(kf), agent=False,
                  known_hosts=str(kh))
    try:
        with SSHPool([t], command_timeout=20) as pool:
            r = pool.run("h2", ["both"])
            assert (r.rc, len(r.stdout), len(r.stderr)) == (3, 64 * 65536, 64 * 65536)
            payload = b"".join(b"line %07d\n" % i for i in range(80000))  # ~1 MiB
            r = pool.run("h2", ["cat"], stdin=payload)
            assert r.ok and r.stdout == payload[::-1].decode()
            slow = pool.run("h2", ["sleep", "3"], timeout=0.3)
            assert "timeout" in slow.error and slow.elapsed_s < 1.5
            assert pool.run("h2", ["both"]).rc == 3  # a new session after the timed-out one
    finally:
        srv.close()


def test_pool_command_to_a_refused_port_is_unreachable_data():
    with SSHPool([SSHTarget(name="nowhere", address="127.0.0.1", port=1)], connect_timeout=2) as pool:
        r = pool.run("nowhere", ["true"])
    assert not r.ok and r.rc is None and "127.0.0.1:1" in r.error


def test_pool_commands_skip_unusable_known_hosts_lines_and_name_a_bad_key(server, tmp_path):
    """Like OpenSSH, lines that cannot be used (garbage, markers, unknown key types) are
    skipped, not fatal; a key file that is not a usable private key is named in the error."""
    srv, target, _, hk = server
    kh = tmp_path / "kh_messy"
    kh.write_bytes(b"# comment\n\n\x00\xffgarbage line\n@cert-authority *.example ssh-ed25519 AAAAC3Nza\n"
                   b"other.example sk-ecdsa-sha2-nistp256@openssh.com AAAAInvalid\n"
                   + f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n".encode())
    target.known_hosts = str(kh)
    with SSHPool([target]) as pool:
        assert pool.run("h1", ["echo", "ok"]).stdout == "ok\n"
    for content, why in ((b"not a key\n", "not a PEM/OpenSSH private key"),
                         (b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n", "could not be used")):
        bad = tmp_path / "badkey"
        bad.write_bytes(content)
        target.key_file = str(bad)
        with SSHPool([target]) as pool:
            r = pool.run("h1", ["echo", "x"])
        assert not r.ok and str(bad) in r.error and why in r.error
    target.key_file = str(tmp_path)  # a directory
    with SSHPool([target]) as pool:
        assert "Is a directory" in pool.run("h1", ["true"]).error


def test_one_shot_run_many_closes_each_session_when_done_and_host_names_resolve(server):
    srv, target, seen, _ = server
    import dataclasses
    byname = dataclasses.replace(target, name="h2", address="localhost")  # a name, not an IP (resolved as bytes)
    kh = open(target.known_hosts).read()
    open(target.known_hosts, "a").write(kh.replace("127.0.0.1", "localhost"))
    with SSHPool([target, byname]) as pool:
        kept = pool.run_many(["h1", "h2"], lambda h: ["echo", h])
        assert [r.stdout for r in kept] == ["h1\n", "h2\n"] and set(pool._exec) == {"h1", "h2"}
        once = pool.run_many(["h1", "h2"], lambda h: ["echo", h], close=True)
        assert [r.stdout for r in once] == ["h1\n", "h2\n"] and not pool._exec


def test_errors_lose_their_own_endpoint_to_fold():
    from mfctl.transport.ssh import CommandResult, without_endpoint

    ep = "10.0.0.7:2222"
    assert without_endpoint("host key of [10.0.0.7]:2222 is not in /k", ep) == "host key of <address>:<port> is not in /k"
    assert without_endpoint("cannot connect to 10.0.0.7:2222: refused", ep) == "cannot connect to <address>:<port>: refused"
    assert without_endpoint("cannot connect to 10.0.0.77:22: refused", ep) == "cannot connect to 10.0.0.77:22: refused"
    assert CommandResult("h", ["x"], error=None, endpoint=ep).error_shared is None


def test_both_stacks_give_the_one_policys_verdicts_and_texts(server, tmp_path):
    """paramiko (interactive sessions) and libssh2 (commands) ask the same HostKeyPolicy: the same
    words for an unknown and for a changed key; a host filed only under another key type shows its
    key of another type, and that is CHANGED for both (OpenSSH's rule), never recorded by accept-new."""
    srv, target, _, hk = server
    kh = tmp_path / "kh_types"
    target.known_hosts = str(kh)
    with pytest.raises(UnreachableError) as e:
        connect(target, timeout=3)
    with SSHPool([target]) as pool:
        r = pool.run("h1", ["echo", "x"])
    assert str(e.value) == f"h1: {r.error}" == (f"h1: host key of [127.0.0.1]:{srv.port} is not in {kh} "
                                                "(add it, or set host_key_policy: accept-new)")
    rsa = paramiko.RSAKey.generate(1024)
    kh.write_text(f"[127.0.0.1]:{srv.port} ssh-rsa {rsa.get_base64()}\n")
    for policy in ("strict", "accept-new"):
        target.host_key_policy = policy
        with pytest.raises(UnreachableError) as e:
            connect(target, timeout=3)
        with SSHPool([target]) as pool:
            r = pool.run("h1", ["echo", "x"])
        assert str(e.value) == f"h1: {r.error}" == (
            f"h1: host key CHANGED for 127.0.0.1:{srv.port} — refusing to connect: it offered its ECDSA key, and {kh} "
            f"lists another for [127.0.0.1]:{srv.port} (RSA); an impostor, or a reinstalled host: check it, then "
            f"ssh-keygen -f {kh} -R '[127.0.0.1]:{srv.port}'")
    assert kh.read_text() == f"[127.0.0.1]:{srv.port} ssh-rsa {rsa.get_base64()}\n"


def test_an_unreadable_known_hosts_is_the_hosts_failure_on_both_stacks(server, tmp_path):
    import os

    if os.geteuid() == 0:
        target = server[1]
        target.known_hosts = str(tmp_path)  # a directory: unreadable as a file, even for root
    else:
        target = server[1]
        os.chmod(target.known_hosts, 0)
    with pytest.raises(UnreachableError, match="cannot read known_hosts"):
        connect(target, timeout=3)
    with SSHPool([target]) as pool:
        assert "cannot read known_hosts" in pool.run("h1", ["true"]).error


def test_paramiko_failures_are_the_error_raised_not_a_traceback_on_stderr():
    """paramiko's transport thread logs an error and a traceback for a server that closes before its
    banner; with no handler of the caller's, Python's last-resort handler printed them on stderr."""
    import subprocess
    import sys

    code = ("import socket, threading\n"
            "from mfctl.errors import UnreachableError\n"
            "from mfctl.transport.ssh import SSHTarget, connect\n"
            "srv = socket.create_server(('127.0.0.1', 0))\n"
            "threading.Thread(target=lambda: [srv.accept()[0].close() for _ in range(9)], daemon=True).start()\n"
            "t = SSHTarget('h1', '127.0.0.1', srv.getsockname()[1], agent=False, known_hosts='/dev/null')\n"
            "try:\n    connect(t, 3)\nexcept UnreachableError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stderr == "" and r.stdout.startswith("h1: SSH to 127.0.0.1:") and r.stdout.endswith(
        "failed: the server closed the connection before sending its SSH banner (sshd refusing more unauthenticated "
        "connections: MaxStartups; or no SSH server on that port)\n")


def test_libssh2_handshake_failures_in_words():
    """libssh2's exceptions carry no text: its last_error() and the class say what happened (as seen
    against a real sshd: test_e2e_openssh.py; a kex failure from an sshd with only an rsa key and a
    session limited to ed25519)."""
    from ssh2 import exceptions as E

    from mfctl.transport import libssh2 as L

    assert L.handshake_failure(E.SocketDisconnectError(), "Failed getting banner") == L.CLOSED_BEFORE_BANNER
    assert L.handshake_failure(E.SocketRecvError(), "Failed getting banner") == L.CLOSED_BEFORE_BANNER
    assert L.handshake_failure(E.SSH2Error(), "Unable to exchange encryption keys") == L.CLOSED_IN_KEX
    assert L.handshake_failure(E.KexFailureError(), "Unable to exchange encryption keys") == (
        "key exchange failed: the server and mfctl have no algorithm in common (Unable to exchange encryption keys)")
    assert L.handshake_failure(E.SSH2Error(), "") == "the SSH handshake failed (SSH2Error)"
    assert L.handshake_failure(E.MethodNotSupported(), "Invalid method") == (
        "the SSH handshake failed (MethodNotSupported: Invalid method)")
