"""The one host-key policy (mfctl.transport.hostkeys): known_hosts as OpenSSH writes it, the
known/unknown/changed verdict, accept-new recording, and the texts both SSH stacks give."""

import base64
import hashlib
import hmac
import os
import threading

import pytest

from mfctl.errors import UnreachableError
from mfctl.transport.hostkeys import HostKeyPolicy, KnownHosts, known_hosts_name

KEY_A = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(32))
KEY_B = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(1, 33))
ECDSA = b"\x00\x00\x00\x13ecdsa-sha2-nistp256" + b"\x01" * 40


def line(name: str, keytype: str, blob: bytes) -> str:
    return f"{name} {keytype} {base64.b64encode(blob).decode()}\n"


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_the_name_keys_are_filed_under():
    assert known_hosts_name("10.0.0.7", 22) == "10.0.0.7"
    assert known_hosts_name("10.0.0.7", 2222) == "[10.0.0.7]:2222"


def test_plain_hashed_and_port_entries_and_lines_that_cannot_be_used(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_bytes(b"# a comment\n\n\x00\xffgarbage\n@cert-authority *.example ssh-ed25519 AAAA\n"
                   b"x.example ssh-ed25519 not-base64!\n"
                   + line("gpu01,10.0.0.1", "ssh-ed25519", KEY_A).encode()
                   + line("[10.0.0.2]:2222", "ssh-ed25519", KEY_A).encode()
                   + line(hashed("[10.0.0.3]:2200"), "ecdsa-sha2-nistp256", ECDSA).encode())
    p = HostKeyPolicy(kh)
    assert p.verdict("10.0.0.1", 22, "ssh-ed25519", KEY_A) == "known"  # one name of a comma list
    assert p.verdict("gpu01", 22, "ssh-ed25519", KEY_A) == "known"
    assert p.verdict("10.0.0.2", 2222, "ssh-ed25519", KEY_A) == "known"
    assert p.verdict("10.0.0.2", 22, "ssh-ed25519", KEY_A) == "unknown"  # filed for its port only
    assert p.verdict("10.0.0.3", 2200, "ecdsa-sha2-nistp256", ECDSA) == "known"  # HashKnownHosts yes
    assert p.verdict("10.0.0.3", 2201, "ecdsa-sha2-nistp256", ECDSA) == "unknown"
    assert p.verdict("10.0.0.1", 22, "ssh-ed25519", KEY_B) == "changed"
    assert p.verdict("10.0.0.3", 2200, "ecdsa-sha2-nistp256", ECDSA[:-1] + b"\x02") == "changed"
    # a key of another type than those filed is unknown (OpenSSH's rule), not changed
    assert p.verdict("10.0.0.1", 22, "ecdsa-sha2-nistp256", ECDSA) == "unknown"
    assert p.known_types("10.0.0.1", 22) == ["ssh-ed25519"] and p.known_types("10.9.9.9", 22) == []
    parsed = KnownHosts.parse(kh.read_bytes())
    assert sorted(parsed.plain) == ["10.0.0.1", "[10.0.0.2]:2222", "gpu01"] and len(parsed.hashed) == 1


def test_strict_refuses_unknown_and_changed_keys_with_the_texts_both_stacks_give(tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A))
    p = HostKeyPolicy(kh)
    assert p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_A) == "known"
    with pytest.raises(UnreachableError) as e:
        p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_B)
    assert str(e.value) == "gpu01: host key CHANGED for 127.0.0.1:2222 — refusing to connect" and e.value.exit_code == 4
    with pytest.raises(UnreachableError) as e:
        p.check("gpu02", "127.0.0.1", 2223, "ssh-ed25519", KEY_A)
    assert str(e.value) == (f"gpu02: host key of [127.0.0.1]:2223 is not in {kh} "
                            "(add it, or set host_key_policy: accept-new)")
    assert kh.read_text() == line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A)  # strict writes nothing


def test_accept_new_records_once_even_from_many_threads_and_still_refuses_a_changed_key(tmp_path):
    kh = tmp_path / "sub" / "kh"  # the folder is made
    p = HostKeyPolicy(kh, "accept-new")
    verdicts, go = [], threading.Barrier(8)

    def first_contact():
        go.wait()
        verdicts.append(p.check("gpu01", "10.0.0.1", 22, "ssh-ed25519", KEY_A))

    threads = [threading.Thread(target=first_contact) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert kh.read_text() == line("10.0.0.1", "ssh-ed25519", KEY_A)  # one line, OpenSSH's format
    assert sorted(verdicts) == ["known"] * 7 + ["unknown"]
    assert p.check("gpu01", "10.0.0.1", 22, "ssh-ed25519", KEY_A) == "known"  # the cache saw the append
    with pytest.raises(UnreachableError, match="CHANGED"):
        p.check("gpu01", "10.0.0.1", 22, "ssh-ed25519", KEY_B)
    assert p.check("gpu01", "10.0.0.1", 22, "ecdsa-sha2-nistp256", ECDSA) == "unknown"  # another type: recorded
    assert kh.read_text().count("\n") == 2


def test_an_edit_of_the_file_is_seen_and_an_unreadable_file_is_the_hosts_failure(tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(line("h", "ssh-ed25519", KEY_A))
    p = HostKeyPolicy(kh)
    assert p.verdict("h", 22, "ssh-ed25519", KEY_A) == "known"
    st = os.stat(kh)
    kh2 = tmp_path / "kh2"
    kh2.write_text(line("h", "ssh-ed25519", KEY_B))  # the same size and modification time ...
    os.utime(kh2, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(kh2, kh)  # ... in a new inode, as editors and ssh-keygen -R write
    assert p.verdict("h", 22, "ssh-ed25519", KEY_A) == "changed"
    if os.geteuid() != 0:
        kh.chmod(0)
        with pytest.raises(UnreachableError, match=f"^h1: cannot read known_hosts {kh}: Permission denied"):
            p.check("h1", "h", 22, "ssh-ed25519", KEY_A)
    assert HostKeyPolicy(tmp_path / "missing").verdict("h", 22, "ssh-ed25519", KEY_A) == "unknown"
