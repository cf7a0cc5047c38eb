"""Host-key policy: the one place that decides whether a host's SSH key may be trusted.

Both SSH stacks ask it after their key exchange and before they authenticate — libssh2 for
commands (:mod:`mfctl.transport.libssh2`), paramiko for interactive sessions
(:func:`mfctl.transport.ssh.connect`) — with the key blob the server offered (wire format, as in
a known_hosts line after base64 decoding; its key type is the blob's first field). Before the key
exchange both ask it which key types the host is known by (:meth:`HostKeyPolicy.known_types`) and
put those host-key algorithms first (:func:`algorithm_preference`), as OpenSSH orders
``HostKeyAlgorithms`` by known_hosts: a host known by ed25519 is asked for ed25519 although the
library would prefer ecdsa.

Rules — OpenSSH's (``sshconnect.c``/``hostfile.c`` of OpenSSH 9.2, and ``man sshd``, SSH_KNOWN_HOSTS
FILE FORMAT), for the name ``address`` (port 22) or ``[address]:port``:

- ``revoked``: the key is on a ``@revoked`` line whose patterns match the host — refused, even if
  it is also listed normally;
- ``known``: the key is on a plain line that matches the host;
- ``changed``: the host matches plain lines, but none holds this key — of *any* key type (an
  impostor offering a key type the file does not list is CHANGED, not new) — refused under both
  policies, never recorded;
- on a port other than 22 a key unknown under ``[address]:port`` is looked up under ``address``
  too, and only a match counts (OpenSSH's "checking without port identifier");
- ``certified``: no plain line matches, but a ``@cert-authority`` line does: mfctl does not check
  host certificates, so it refuses, naming the line, under both policies (a host meant to be
  vouched for by a CA must not be trusted on first use instead);
- ``unknown``: nothing matches: ``strict`` refuses, ``accept-new`` records the key (one plain line
  appended, like ``StrictHostKeyChecking=accept-new``) and trusts it.

A line's host field is a comma list of patterns matched as OpenSSH's ``match_hostname``: ``*`` and
``?`` wildcards, ``!pattern`` negation (a matching negation excludes the line whatever else
matches), case-insensitive; ``[`` and ``]`` are literal (``[10.0.0.*]:2222``); or one hashed name
``|1|base64(salt)|base64(HMAC-SHA1(salt, name))`` (``HashKnownHosts yes``, ``ssh-keyscan -H``).
Lines that cannot be used — comments, unknown markers, bad base64, a key type field that differs
from the blob's — are skipped, as OpenSSH does. A file is parsed once per process and version
(modification time, size, inode).

Every refusal is an :class:`~mfctl.errors.UnreachableError` (exit 4) whose text is written here
and only here (the ``*_error`` functions); none holds key material.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import re
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, Sequence

from mfctl.errors import UnreachableError

log = logging.getLogger(__name__)

Mode = Literal["strict", "accept-new"]
Verdict = Literal["known", "unknown", "changed", "revoked", "certified"]
Marker = Literal["", "revoked", "cert-authority"]

_CERT_SUFFIX = "-cert-v01@openssh.com"
#: host-key algorithms whose key type is another name (RFC 8332: RSA keys signed with SHA-2)
_ALGORITHM_KEYTYPE = {"rsa-sha2-256": "ssh-rsa", "rsa-sha2-512": "ssh-rsa"}
#: what a key type is called in messages (OpenSSH's words: "ED25519 key", "ECDSA key", "RSA key")
_TYPE_WORD = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ssh-dss": "DSA", "ecdsa-sha2-nistp256": "ECDSA",
              "ecdsa-sha2-nistp384": "ECDSA", "ecdsa-sha2-nistp521": "ECDSA"}


def known_hosts_name(address: str, port: int) -> str:
    """The name a host's keys are filed under in known_hosts: ``address`` on port 22, else
    ``[address]:port`` (OpenSSH's convention)."""
    return address if port == 22 else f"[{address}]:{port}"


def blob_keytype(blob: bytes) -> str | None:
    """The key type a wire-format key names in its first field (``ssh-ed25519``…), or None when
    the blob is not an SSH key blob (a uint32 length and an ASCII name)."""
    if len(blob) < 4:
        return None
    (n,) = struct.unpack(">I", blob[:4])
    name = blob[4:4 + n]
    if not 0 < n <= 64 or len(name) != n or not name.isascii():
        return None
    return name.decode("ascii")


def keytype_of_algorithm(algorithm: str) -> str:
    """The key type a host-key algorithm signs with: ``rsa-sha2-512`` → ``ssh-rsa``; a certificate
    algorithm (``…-cert-v01@openssh.com``) → the certified key's type; otherwise the same name."""
    base = algorithm.removesuffix(_CERT_SUFFIX)
    return _ALGORITHM_KEYTYPE.get(base, base)


def algorithm_preference(supported: Iterable[str], known: Sequence[str]) -> list[str]:
    """``supported`` (a client library's host-key algorithms, in its order) with the algorithms of
    the ``known`` key types first, the others after in their order (OpenSSH's ``order_hostkeyalgs``:
    a known host is asked for the keys it is known by; an impostor that has none of them still
    shows its key and is then CHANGED). Certificate algorithms are left out: mfctl does not check
    host certificates."""
    plain = [a for a in supported if not a.endswith(_CERT_SUFFIX)]
    # OpenSSH's own order before the library's (libssh2 puts ecdsa first): a host met for the first
    # time shows the key ``ssh`` would record (ed25519), and known types go first of all
    plain.sort(key=lambda a: _OPENSSH_ORDER.index(keytype_of_algorithm(a))
               if keytype_of_algorithm(a) in _OPENSSH_ORDER else len(_OPENSSH_ORDER))
    first = [a for a in plain if keytype_of_algorithm(a) in known]
    return first + [a for a in plain if a not in first]


#: OpenSSH 9's default HostKeyAlgorithms order by key type (ssh_config(5), HostKeyAlgorithms)
_OPENSSH_ORDER = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                  "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com", "ssh-rsa")


def _glob(pattern: str) -> re.Pattern:
    """One pattern of a host field as a regex: ``*`` any run, ``?`` one character, the rest literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


@dataclass(frozen=True)
class Entry:
    """One usable known_hosts line: 1-based ``line``, ``marker`` (``""``, ``revoked`` or
    ``cert-authority``), the host field as written, the key type and key blob."""

    line: int
    marker: Marker
    hosts: str
    keytype: str
    blob: bytes
    _positive: tuple[re.Pattern, ...] = field(default=(), repr=False, compare=False)
    _negative: tuple[re.Pattern, ...] = field(default=(), repr=False, compare=False)
    _hashed: tuple[bytes, bytes] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def make(cls, line: int, marker: Marker, hosts: str, keytype: str, blob: bytes) -> "Entry | None":
        if hosts.startswith("|1|"):
            try:
                salt_b64, digest_b64 = hosts[3:].split("|")
                hashed = (base64.b64decode(salt_b64, validate=True), base64.b64decode(digest_b64, validate=True))
            except (binascii.Error, ValueError):
                return None
            return cls(line, marker, hosts, keytype, blob, _hashed=hashed)
        pos, neg = [], []
        for p in hosts.lower().split(","):
            if p.startswith("!"):
                neg.append(_glob(p[1:]))
            elif p:
                pos.append(_glob(p))
        return cls(line, marker, hosts, keytype, blob, tuple(pos), tuple(neg))

    def matches(self, name: str) -> bool:
        """Whether this line is for ``name`` (OpenSSH's ``match_hostname``, or the hashed name)."""
        if self._hashed is not None:
            salt, digest = self._hashed
            return hmac.compare_digest(hmac.digest(salt, name.encode(), "sha1"), digest)
        low = name.lower()
        if any(p.fullmatch(low) for p in self._negative):
            return False
        return any(p.fullmatch(low) for p in self._positive)


@dataclass
class KnownHosts:
    """One parsed known_hosts file: its usable lines in file order."""

    entries: list[Entry] = field(default_factory=list)
    _by_name: dict[str, list[Entry]] = field(default_factory=dict, repr=False)  # lookups, memoised

    @classmethod
    def parse(cls, raw: bytes) -> "KnownHosts":
        kh = cls()
        for no, line in enumerate(raw.splitlines(), 1):
            words = line.split()
            if not words or words[0].startswith(b"#"):
                continue
            marker: Marker = ""
            if words[0].startswith(b"@"):
                if words[0] not in (b"@revoked", b"@cert-authority"):
                    continue  # OpenSSH: an unknown marker makes the line invalid
                marker = "revoked" if words[0] == b"@revoked" else "cert-authority"
                words = words[1:]
            if len(words) < 3:
                continue
            try:
                hosts, keytype = words[0].decode("ascii"), words[1].decode("ascii")
                blob = base64.b64decode(words[2], validate=True)
            except (binascii.Error, ValueError):
                continue
            if blob_keytype(blob) != keytype:
                continue  # a damaged line, or a key type field that does not name its key
            entry = Entry.make(no, marker, hosts, keytype, blob)
            if entry is not None:
                kh.entries.append(entry)
        return kh

    def matching(self, name: str) -> list[Entry]:
        """Every line whose host field matches ``name``, in file order."""
        hit = self._by_name.get(name)
        if hit is None:
            hit = self._by_name[name] = [e for e in self.entries if e.matches(name)]
        return hit


_CACHE: dict[str, tuple[tuple[int, int, int], KnownHosts]] = {}
_LOCK = threading.Lock()  # the cache


def load(path: Path, host: str = "") -> KnownHosts:
    """``path`` parsed (cached per version); a missing file knows no host. Raises UnreachableError
    naming ``host`` when the file exists but cannot be read."""
    def fail(e: OSError):
        return UnreachableError(f"{host + ': ' if host else ''}cannot read known_hosts {path}: {e.strerror or e}")

    try:
        st = path.stat()
    except FileNotFoundError:
        return KnownHosts()
    except OSError as e:
        raise fail(e) from e
    version = (st.st_mtime_ns, st.st_size, st.st_ino)
    with _LOCK:
        hit = _CACHE.get(str(path))
        if hit is not None and hit[0] == version:
            return hit[1]
        try:
            kh = KnownHosts.parse(path.read_bytes())
        except OSError as e:
            raise fail(e) from e
        _CACHE[str(path)] = (version, kh)
        return kh


@dataclass(frozen=True)
class Finding:
    """What known_hosts says about one offered key: the verdict, the name looked up, and the lines
    behind it (the matching key's, the other keys', the ``@revoked`` or ``@cert-authority`` line)."""

    verdict: Verdict
    name: str
    entries: tuple[Entry, ...] = ()


def _word(keytype: str) -> str:
    return _TYPE_WORD.get(keytype, keytype)


def _lines(known_hosts: Path, entries: Sequence[Entry]) -> str:
    return f"{known_hosts}:{','.join(str(e.line) for e in entries)}"


def changed_error(host: str, address: str, port: int, known_hosts: Path | None = None, offered: str = "",
                  finding: Finding | None = None) -> UnreachableError:
    """The host's key is not the one (or ones) known_hosts holds for it. No line numbers: hosts
    reinstalled together fold into one line of ``mfctl exec`` (``ssh-keygen -R`` needs none)."""
    text = f"{host}: host key CHANGED for {address}:{port} — refusing to connect"
    if known_hosts is not None and finding is not None:
        listed = " and ".join(dict.fromkeys(_word(e.keytype) for e in finding.entries))
        text += (f": it offered its {_word(offered)} key, and {known_hosts} lists another for {finding.name} "
                 f"({listed}); an impostor, or a reinstalled host: check it, then "
                 f"ssh-keygen -f {known_hosts} -R '{finding.name}'")
    return UnreachableError(text)


def unknown_error(host: str, address: str, port: int, known_hosts: Path) -> UnreachableError:
    return UnreachableError(f"{host}: host key of {known_hosts_name(address, port)} is not in {known_hosts} "
                            "(add it, or set host_key_policy: accept-new)")


def revoked_error(host: str, address: str, port: int, known_hosts: Path, offered: str,
                  finding: Finding) -> UnreachableError:
    return UnreachableError(f"{host}: host key REVOKED for {address}:{port} — refusing to connect: its "
                            f"{_word(offered)} key is marked @revoked at {_lines(known_hosts, finding.entries)} "
                            "(a stolen key may be in use)")


def certified_error(host: str, address: str, port: int, known_hosts: Path, finding: Finding) -> UnreachableError:
    return UnreachableError(f"{host}: {_lines(known_hosts, finding.entries)} vouches for {finding.name} by "
                            "@cert-authority (host certificates), which mfctl does not check — refusing to connect: "
                            f"list the host's own key in {known_hosts} (ssh-keyscan -p {port} {address})")


def certificate_offered_error(host: str, address: str, port: int) -> UnreachableError:
    return UnreachableError(f"{host}: {address}:{port} offered a host certificate, which mfctl does not check "
                            "— refusing to connect")


@dataclass(frozen=True)
class HostKeyPolicy:
    """The rules for one known_hosts file (``~`` expanded by the caller or here)."""

    known_hosts: Path
    mode: Mode = "strict"

    @classmethod
    def of(cls, target) -> "HostKeyPolicy":
        """The policy of an :class:`~mfctl.transport.ssh.SSHTarget` (its known_hosts and host_key_policy)."""
        return cls(Path(target.known_hosts).expanduser(), "accept-new" if target.host_key_policy == "accept-new" else "strict")

    def known_types(self, address: str, port: int, *, host: str = "") -> list[str]:
        """The key types the host is known by (plain lines for its name, else — another port than
        22 — for its bare address), in file order: what a client asks the server for first. A key
        that is also ``@revoked`` counts only when no other does (OpenSSH's ``order_hostkeyalgs``
        skips it; asking for it still, when it is all there is — listed, or only in a ``@revoked``
        line — gets the REVOKED verdict from a server that has it rather than another key recorded
        under accept-new or called unknown)."""
        kh = load(self.known_hosts, host)
        names = [known_hosts_name(address, port)] + ([address] if port != 22 else [])
        for name in names:
            lines = kh.matching(name)
            revoked = {e.blob for e in lines if e.marker == "revoked"}
            plain = [e for e in lines if not e.marker]
            types = ([e.keytype for e in plain if e.blob not in revoked] or [e.keytype for e in plain]
                     or [e.keytype for e in lines if e.marker == "revoked"])  # only revoked: show it, REVOKED
            if types:
                return list(dict.fromkeys(types))
        return []

    def judge(self, address: str, port: int, blob: bytes, *, host: str = "") -> Finding:
        """What the file says about ``blob`` offered by the host (see the module's rules); reads the
        file, decides nothing."""
        kh = load(self.known_hosts, host)
        name = known_hosts_name(address, port)
        lines = kh.matching(name)
        revoked = tuple(e for e in lines if e.marker == "revoked" and e.blob == blob)
        if revoked:
            return Finding("revoked", name, revoked)
        plain = tuple(e for e in lines if not e.marker)
        same = tuple(e for e in plain if e.blob == blob)
        if same:
            return Finding("known", name, same)
        if plain:
            return Finding("changed", name, plain)
        if port != 22:  # OpenSSH: "checking without port identifier" — a match only
            bare = kh.matching(address)
            revoked = tuple(e for e in bare if e.marker == "revoked" and e.blob == blob)
            if revoked:
                return Finding("revoked", address, revoked)
            same = tuple(e for e in bare if not e.marker and e.blob == blob)
            if same:
                return Finding("known", address, same)
        cas = tuple(e for e in lines if e.marker == "cert-authority")
        if cas:
            return Finding("certified", name, cas)
        return Finding("unknown", name)

    def verdict(self, address: str, port: int, keytype: str, blob: bytes, *, host: str = "") -> Verdict:
        """:meth:`judge`'s verdict alone (``keytype`` is the blob's own; kept for callers that name it)."""
        return self.judge(address, port, blob, host=host).verdict

    def check(self, host: str, address: str, port: int, keytype: str, blob: bytes) -> Verdict:
        """Trust the key or raise UnreachableError (its text names ``host``, the inventory name).
        Returns ``known``, or ``unknown`` when accept-new has just recorded it. ``keytype`` is what
        the library called the key; the blob's own type is what is judged and recorded."""
        offered = blob_keytype(blob)
        if offered is None:
            raise UnreachableError(f"{host}: {address}:{port} offered a host key mfctl cannot read ({keytype})")
        if offered.endswith(_CERT_SUFFIX):
            raise certificate_offered_error(host, address, port)
        f = self.judge(address, port, blob, host=host)
        if f.verdict == "known":
            return "known"
        self._refuse(host, address, port, offered, f)
        if self.mode != "accept-new":
            raise unknown_error(host, address, port, self.known_hosts)
        return self._record(host, address, port, offered, blob)

    def _refuse(self, host: str, address: str, port: int, offered: str, f: Finding) -> None:
        """Raise for every verdict but ``known`` and ``unknown``."""
        if f.verdict == "changed":
            raise changed_error(host, address, port, self.known_hosts, offered, f)
        if f.verdict == "revoked":
            raise revoked_error(host, address, port, self.known_hosts, offered, f)
        if f.verdict == "certified":
            raise certified_error(host, address, port, self.known_hosts, f)

    def _record(self, host: str, address: str, port: int, keytype: str, blob: bytes) -> Verdict:
        name = known_hosts_name(address, port)
        with _RECORD_LOCK:  # recorded once even when two sessions to one host meet it at once
            f = self.judge(address, port, blob, host=host)
            if f.verdict == "known":
                return "known"
            self._refuse(host, address, port, keytype, f)
            try:
                self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
                with open(self.known_hosts, "a+b") as fh:
                    fh.seek(0, 2)
                    at = fh.tell()
                    fh.seek(max(0, at - 1))
                    lead = b"\n" if at and fh.read(1) != b"\n" else b""  # a last line without its newline
                    fh.write(lead + f"{name} {keytype} {base64.b64encode(blob).decode()}\n".encode())
            except OSError as e:
                raise UnreachableError(f"{host}: cannot record the host key of {name} in {self.known_hosts}: "
                                       f"{e.strerror or e}") from e
        log.warning("accepted new host key for %s (%s)", name, keytype)
        return "unknown"


_RECORD_LOCK = threading.Lock()  # appending to a known_hosts file (separate from the cache's lock)
