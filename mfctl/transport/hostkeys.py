"""Host-key policy: the one place that decides whether a host's SSH key may be trusted.

Both SSH stacks ask it after their key exchange and before they authenticate — libssh2 for
commands (:mod:`mfctl.transport.libssh2`), paramiko for interactive sessions
(:func:`mfctl.transport.ssh.connect`) — with what the server offered: its key type
(``ssh-ed25519``, ``ecdsa-sha2-nistp256``…) and the key blob (the wire-format bytes, as in
a known_hosts line after base64 decoding). Rules (the inventory's ``ssh.host_key_policy``):

- ``strict`` (default): the key must be in ``known_hosts``; an unknown host is refused;
- ``accept-new``: a host with no key of the offered type is recorded (one line appended,
  like OpenSSH's ``StrictHostKeyChecking=accept-new``), then trusted;
- under both, a host whose known key *of the offered type* differs is refused (``CHANGED``).

``known_hosts`` is read as OpenSSH writes it: ``host[,host…] keytype base64 [comment]`` lines,
plain names (``address`` for port 22, ``[address]:port`` otherwise) and hashed ones
(``|1|salt|HMAC-SHA1(salt, name)``, ``HashKnownHosts yes``). Lines it cannot use — comments,
markers (``@cert-authority``, ``@revoked``: not used by mfctl), garbage — are skipped, as
OpenSSH does. Wildcard and negated patterns are not matched (neither stack ever did). A file is
parsed once per process and version (modification time, size, inode).

Every refusal is an :class:`~mfctl.errors.UnreachableError` (exit 4) whose text is written here
and only here (:func:`changed_error`, :func:`unknown_error`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mfctl.errors import UnreachableError

log = logging.getLogger(__name__)

Mode = Literal["strict", "accept-new"]
Verdict = Literal["known", "unknown", "changed"]


def known_hosts_name(address: str, port: int) -> str:
    """The name a host's keys are filed under in known_hosts: ``address`` on port 22, else
    ``[address]:port`` (OpenSSH's convention)."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass
class KnownHosts:
    """One parsed known_hosts file: keys by plain name, and the hashed entries."""

    plain: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)  # name → [(keytype, blob)]
    hashed: list[tuple[bytes, bytes, str, bytes]] = field(default_factory=list)  # (salt, digest, keytype, blob)

    @classmethod
    def parse(cls, raw: bytes) -> "KnownHosts":
        kh = cls()
        for line in raw.splitlines():
            words = line.split()
            if len(words) < 3 or words[0].startswith((b"#", b"@")):
                continue
            hosts, ktype, b64 = words[:3]
            try:
                blob = base64.b64decode(b64, validate=True)
                keytype = ktype.decode("ascii")
            except (binascii.Error, ValueError):
                continue
            if hosts.startswith(b"|1|"):
                try:
                    salt_b64, digest_b64 = hosts[3:].split(b"|")
                    kh.hashed.append((base64.b64decode(salt_b64, validate=True),
                                      base64.b64decode(digest_b64, validate=True), keytype, blob))
                except (binascii.Error, ValueError):
                    pass
                continue
            for name in hosts.split(b","):
                try:
                    kh.plain.setdefault(name.decode("ascii"), []).append((keytype, blob))
                except UnicodeDecodeError:
                    pass
        return kh

    def keys_for(self, name: str) -> list[tuple[str, bytes]]:
        """Every (keytype, blob) filed under ``name``, plain entries first, then hashed ones."""
        out = list(self.plain.get(name, ()))
        enc = name.encode()
        for salt, digest, keytype, blob in self.hashed:
            if hmac.compare_digest(hmac.new(salt, enc, hashlib.sha1).digest(), digest):
                out.append((keytype, blob))
        return out


_CACHE: dict[str, tuple[tuple[int, int, int], KnownHosts]] = {}
_LOCK = threading.Lock()  # the cache, and appending to a known_hosts file


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


def changed_error(host: str, address: str, port: int) -> UnreachableError:
    return UnreachableError(f"{host}: host key CHANGED for {address}:{port} — refusing to connect")


def unknown_error(host: str, address: str, port: int, known_hosts: Path) -> UnreachableError:
    return UnreachableError(f"{host}: host key of {known_hosts_name(address, port)} is not in {known_hosts} "
                            "(add it, or set host_key_policy: accept-new)")


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
        """The key types filed for the host, in file order (a client may ask the server for these first)."""
        return list(dict.fromkeys(t for t, _ in load(self.known_hosts, host).keys_for(known_hosts_name(address, port))))

    def verdict(self, address: str, port: int, keytype: str, blob: bytes, *, host: str = "") -> Verdict:
        """``known`` (a key of this type is filed for the host and it is this one), ``changed`` (the
        one filed differs), else ``unknown``; reads the file, decides nothing."""
        keys = [b for t, b in load(self.known_hosts, host).keys_for(known_hosts_name(address, port)) if t == keytype]
        if not keys:
            return "unknown"
        return "known" if any(hmac.compare_digest(b, blob) for b in keys) else "changed"

    def check(self, host: str, address: str, port: int, keytype: str, blob: bytes) -> Verdict:
        """Trust the key or raise UnreachableError (its text names ``host``, the inventory name).
        Returns ``known``, or ``unknown`` when accept-new has just recorded it."""
        v = self.verdict(address, port, keytype, blob, host=host)
        if v == "known":
            return v
        if v == "changed":
            raise changed_error(host, address, port)
        if self.mode != "accept-new":
            raise unknown_error(host, address, port, self.known_hosts)
        return self._record(host, address, port, keytype, blob)

    def _record(self, host: str, address: str, port: int, keytype: str, blob: bytes) -> Verdict:
        name = known_hosts_name(address, port)
        with _RECORD_LOCK:  # recorded once even when two sessions to one host meet it at once
            v = self.verdict(address, port, keytype, blob, host=host)
            if v == "changed":
                raise changed_error(host, address, port)
            if v == "known":
                return v
            try:
                self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
                with open(self.known_hosts, "a") as f:
                    f.write(f"{name} {keytype} {base64.b64encode(blob).decode()}\n")
            except OSError as e:
                raise UnreachableError(f"{host}: cannot record the host key of {name} in {self.known_hosts}: "
                                       f"{e.strerror or e}") from e
        log.warning("accepted new host key for %s (%s)", name, keytype)
        return "unknown"


_RECORD_LOCK = threading.Lock()  # appending to a known_hosts file (separate from the cache's lock)
