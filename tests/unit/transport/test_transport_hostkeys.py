"""The one host-key policy (mfctl.transport.hostkeys): known_hosts read with OpenSSH's rules —
plain, hashed, wildcard and negated patterns, @revoked, @cert-authority, the port fallback — the
known/unknown/changed/revoked/certified verdict, accept-new recording, the host-key algorithm
order, and the texts both SSH stacks give. (Against a real sshd and real ssh: test_transport_openssh.py.)"""

import base64
import hashlib
import hmac
import os
import threading

import pytest

from mfctl.errors import UnreachableError
from mfctl.transport.hostkeys import (
    HostKeyPolicy,
    KnownHosts,
    algorithm_preference,
    blob_keytype,
    keytype_of_algorithm,
    known_hosts_name,
)

KEY_A = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(32))
KEY_B = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(1, 33))
ECDSA = b"\x00\x00\x00\x13ecdsa-sha2-nistp256" + b"\x01" * 40
RSA = b"\x00\x00\x00\x07ssh-rsa" + b"\x02" * 40
CERT = b"\x00\x00\x00\x20ssh-ed25519-cert-v01@openssh.com" + b"\x03" * 40


def line(name: str, keytype: str, blob: bytes, marker: str = "") -> str:
    return f"{marker + ' ' if marker else ''}{name} {keytype} {base64.b64encode(blob).decode()}\n"


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def policy(tmp_path, text: str, mode="strict", name="kh") -> HostKeyPolicy:
    kh = tmp_path / name
    kh.write_text(text)
    return HostKeyPolicy(kh, mode)


def test_names_key_types_and_the_algorithm_order_openssh_uses():
    assert known_hosts_name("10.0.0.7", 22) == "10.0.0.7"
    assert known_hosts_name("10.0.0.7", 2222) == "[10.0.0.7]:2222"
    assert [blob_keytype(b) for b in (KEY_A, ECDSA, RSA, CERT, b"", b"\xff\xff\xff\xffx")] == [
        "ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa", "ssh-ed25519-cert-v01@openssh.com", None, None]
    # RSA keys sign with SHA-2 (RFC 8332): the algorithm is rsa-sha2-*, the key type ssh-rsa
    assert [keytype_of_algorithm(a) for a in ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa", "ssh-ed25519",
                                              "ecdsa-sha2-nistp384-cert-v01@openssh.com")] == [
        "ssh-rsa", "ssh-rsa", "ssh-rsa", "ssh-ed25519", "ecdsa-sha2-nistp384"]
    libssh2 = ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256-cert-v01@openssh.com", "ssh-ed25519",
               "ssh-ed25519-cert-v01@openssh.com", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
    # known types first; the rest after, in OpenSSH's order (ed25519, ecdsa, rsa), not libssh2's; certificates never
    assert algorithm_preference(libssh2, ["ssh-ed25519"]) == [
        "ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
    assert algorithm_preference(libssh2, ["ssh-rsa"]) == [
        "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa", "ssh-ed25519", "ecdsa-sha2-nistp256"]
    # a host met for the first time shows the key real ssh would record: ed25519 (libssh2 alone: ecdsa)
    assert algorithm_preference(libssh2, []) == ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256",
                                                 "ssh-rsa"]


def test_plain_hashed_and_port_entries_and_lines_that_cannot_be_used(tmp_path):
    p = policy(tmp_path, "# a comment\n\n\x00\xffgarbage\n"
               "x.example ssh-ed25519 not-base64!\n"
               + line("y.example", "ssh-rsa", KEY_A)  # the type field does not name its key: skipped
               + line("z.example", "ssh-ed25519", KEY_A, "@bogus")  # an unknown marker: skipped
               + "@revoked ssh-ed25519\n"  # too short
               + line("gpu01,10.0.0.1", "ssh-ed25519", KEY_A)
               + line("[10.0.0.2]:2222", "ssh-ed25519", KEY_A)
               + line(hashed("[10.0.0.3]:2200"), "ecdsa-sha2-nistp256", ECDSA))
    assert p.verdict("10.0.0.1", 22, "ssh-ed25519", KEY_A) == "known"  # one name of a comma list
    assert p.verdict("GPU01", 22, "ssh-ed25519", KEY_A) == "known"  # names are not case-sensitive
    assert p.verdict("10.0.0.2", 2222, "ssh-ed25519", KEY_A) == "known"
    assert p.verdict("10.0.0.2", 22, "ssh-ed25519", KEY_A) == "unknown"  # filed for its port only
    assert p.verdict("10.0.0.3", 2200, "ecdsa-sha2-nistp256", ECDSA) == "known"  # HashKnownHosts yes
    assert p.verdict("10.0.0.3", 2201, "ecdsa-sha2-nistp256", ECDSA) == "unknown"
    assert p.verdict("10.0.0.1", 22, "ssh-ed25519", KEY_B) == "changed"
    assert p.verdict("10.0.0.3", 2200, "ecdsa-sha2-nistp256", ECDSA[:-1] + b"\x02") == "changed"
    # a key of another type than those filed is CHANGED too (OpenSSH: "a non-matching key exists")
    assert p.verdict("10.0.0.1", 22, "ecdsa-sha2-nistp256", ECDSA) == "changed"
    assert p.verdict("x.example", 22, "ssh-ed25519", KEY_A) == p.verdict("y.example", 22, "ssh-rsa", KEY_A) == "unknown"
    assert p.verdict("z.example", 22, "ssh-ed25519", KEY_A) == "unknown"
    assert p.known_types("10.0.0.1", 22) == ["ssh-ed25519"] and p.known_types("10.9.9.9", 22) == []
    parsed = KnownHosts.parse(p.known_hosts.read_bytes())
    assert [(e.line, e.hosts) for e in parsed.entries] == [(8, "gpu01,10.0.0.1"), (9, "[10.0.0.2]:2222"),
                                                           (10, hashed("[10.0.0.3]:2200"))]


@pytest.mark.parametrize("hosts, name, matches", [
    ("[10.0.0.*]:2222", "[10.0.0.7]:2222", True),  # brackets are literal, * any run
    ("[10.0.0.*]:2222", "[10.0.0.7]:2223", False),
    ("[10.0.0.?]:2222", "[10.0.0.12]:2222", False),  # ? exactly one character
    ("*", "[10.0.0.7]:2222", True),
    ("*.example", "gpu01.example", True),
    ("*,!gpu02.example", "gpu02.example", False),  # a matching negation excludes the line ...
    ("!gpu02.example,*", "gpu02.example", False),  # ... wherever it stands
    ("!gpu02.example,*", "gpu01.example", True),
    ("!gpu02.example", "gpu01.example", False),  # a negation alone matches nothing
    ("GPU01.Example", "gpu01.example", True),
    ("10.0.0.1", "[10.0.0.1]:2222", False),
    ("[10.0.0.1]:*", "[10.0.0.1]:2222", True),
])
def test_patterns_match_as_openssh_match_hostname(tmp_path, hosts, name, matches):
    kh = KnownHosts.parse(line(hosts, "ssh-ed25519", KEY_A).encode())
    assert bool(kh.matching(name)) is matches


def test_a_known_host_offering_any_other_key_is_changed_under_both_policies_and_never_recorded(tmp_path):
    text = line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A)
    for mode in ("strict", "accept-new"):
        p = policy(tmp_path, text, mode)
        assert p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_A) == "known"
        for blob, offered in ((KEY_B, "ED25519"), (ECDSA, "ECDSA"), (RSA, "RSA")):  # the impostor's key, any type
            with pytest.raises(UnreachableError) as e:
                p.check("gpu01", "127.0.0.1", 2222, "whatever the library says", blob)
            assert str(e.value) == (
                f"gpu01: host key CHANGED for 127.0.0.1:2222 — refusing to connect: it offered its {offered} key, and "
                f"{p.known_hosts} lists another for [127.0.0.1]:2222 (ED25519); an impostor, or a reinstalled host: "
                f"check it, then ssh-keygen -f {p.known_hosts} -R '[127.0.0.1]:2222'") and e.value.exit_code == 4
        assert p.known_hosts.read_text() == text  # nothing recorded


def test_strict_refuses_an_unknown_host_with_the_advice_only_there(tmp_path):
    p = policy(tmp_path, line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A))
    with pytest.raises(UnreachableError) as e:
        p.check("gpu02", "127.0.0.1", 2223, "ssh-ed25519", KEY_A)
    assert str(e.value) == (f"gpu02: host key of [127.0.0.1]:2223 is not in {p.known_hosts} "
                            "(add it, or set host_key_policy: accept-new)")
    assert p.known_hosts.read_text() == line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A)  # strict writes nothing
    with pytest.raises(UnreachableError, match="offered a host certificate, which mfctl does not check"):
        p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", CERT)
    with pytest.raises(UnreachableError, match="offered a host key mfctl cannot read"):
        p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", b"junk")


def test_revoked_keys_are_refused_even_when_listed_and_only_for_the_hosts_the_line_matches(tmp_path):
    text = (line("[127.0.0.1]:2222,[127.0.0.1]:2223", "ecdsa-sha2-nistp256", ECDSA)
            + line("*,![127.0.0.1]:2223", "ecdsa-sha2-nistp256", ECDSA, "@revoked"))
    for mode in ("strict", "accept-new"):
        p = policy(tmp_path, text, mode)
        with pytest.raises(UnreachableError) as e:
            p.check("gpu01", "127.0.0.1", 2222, "ecdsa-sha2-nistp256", ECDSA)
        assert str(e.value) == (f"gpu01: host key REVOKED for 127.0.0.1:2222 — refusing to connect: its ECDSA key is "
                                f"marked @revoked at {p.known_hosts}:2 (a stolen key may be in use)")
        assert p.check("gpu03", "127.0.0.1", 2223, "ecdsa-sha2-nistp256", ECDSA) == "known"  # the line excludes it
        with pytest.raises(UnreachableError, match="REVOKED"):  # a new host with a revoked key: not recorded
            p.check("gpu04", "127.0.0.1", 2224, "ecdsa-sha2-nistp256", ECDSA)
        assert p.known_hosts.read_text() == text
    # a revoked key's type is asked for first only when the host has no other key (then: REVOKED)
    assert p.known_types("127.0.0.1", 2222) == ["ecdsa-sha2-nistp256"]
    p = policy(tmp_path, text + line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A))
    assert p.known_types("127.0.0.1", 2222) == ["ssh-ed25519"] and p.known_types("127.0.0.1", 2223) == [
        "ecdsa-sha2-nistp256"]


def test_cert_authority_lines_are_refused_naming_the_line_unless_the_hosts_own_key_is_listed(tmp_path):
    text = "# CA\n" + line("[127.0.0.*]:*", "ssh-ed25519", KEY_B, "@cert-authority")
    for mode in ("strict", "accept-new"):
        p = policy(tmp_path, text, mode)
        with pytest.raises(UnreachableError) as e:
            p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_A)
        assert str(e.value) == (f"gpu01: {p.known_hosts}:2 vouches for [127.0.0.1]:2222 by @cert-authority (host "
                                "certificates), which mfctl does not check — refusing to connect: list the host's own "
                                f"key in {p.known_hosts} (ssh-keyscan -p 2222 127.0.0.1)")
        assert p.known_hosts.read_text() == text  # accept-new does not record past a CA
    p = policy(tmp_path, text + line("[127.0.0.1]:2222", "ssh-ed25519", KEY_A))
    assert p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_A) == "known"
    assert p.known_types("127.0.0.1", 2222) == ["ssh-ed25519"]  # the CA's key type is not a known key


def test_another_port_falls_back_to_the_bare_address_for_a_matching_key_only(tmp_path):
    """OpenSSH's "checking without port identifier": a key unknown under [address]:port but listed
    under address is known; a different key there does not make the host CHANGED (read-only look-up)."""
    p = policy(tmp_path, line("127.0.0.1", "ssh-ed25519", KEY_A), "accept-new")
    assert p.verdict("127.0.0.1", 2222, "ssh-ed25519", KEY_A) == "known"
    assert p.known_types("127.0.0.1", 2222) == ["ssh-ed25519"]
    assert p.verdict("127.0.0.1", 2222, "ssh-ed25519", KEY_B) == "unknown"
    assert p.check("gpu01", "127.0.0.1", 2222, "ssh-ed25519", KEY_B) == "unknown"  # recorded under its port
    assert p.known_hosts.read_text().splitlines()[1] == line("[127.0.0.1]:2222", "ssh-ed25519", KEY_B).strip()
    assert p.verdict("127.0.0.1", 2222, "ssh-ed25519", KEY_A) == "changed"  # now [address]:port decides


def test_accept_new_records_once_even_from_many_threads_and_then_is_strict_about_the_host(tmp_path):
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
    with pytest.raises(UnreachableError, match="CHANGED"):  # another type on a known host: not recorded beside it
        p.check("gpu01", "10.0.0.1", 22, "ecdsa-sha2-nistp256", ECDSA)
    assert kh.read_text() == line("10.0.0.1", "ssh-ed25519", KEY_A)
    kh.write_text(line("10.0.0.1", "ssh-ed25519", KEY_A).rstrip("\n"))  # a last line without its newline
    assert p.check("gpu02", "10.0.0.2", 22, "ssh-rsa", RSA) == "unknown"
    assert kh.read_text() == line("10.0.0.1", "ssh-ed25519", KEY_A) + line("10.0.0.2", "ssh-rsa", RSA)


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
