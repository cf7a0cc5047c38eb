"""Polatis-style OCS driver: cross-connect read, minimal-diff apply, read-back, journal.

A *cross-connect* is one-way: OCS input port ``in`` (fed by a lane's TX) → output port
``out`` (wired to a lane's RX). A duplex circuit is two cross-connects (DESIGN §2).
Cross-connect maps are ``dict[int, int]`` (input port → output port).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from mfctl.errors import OperationFailed, UnreachableError
from mfctl.ocs import tl1
from mfctl.ocs.client import TL1Client, TL1ConnectionError, TL1Deny
from mfctl.ocs.journal import Journal

log = logging.getLogger(__name__)

_PATCH_RE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")
_SIZE_RE = re.compile(r"SIZE=(\d+)x(\d+)", re.I)


@dataclass
class CrossConnectDiff:
    """What must change to go from ``current`` to ``desired``."""

    delete: dict[int, int]
    add: dict[int, int]
    keep: dict[int, int]

    @property
    def empty(self) -> bool:
        return not self.delete and not self.add

    def to_dict(self) -> dict:
        return {"delete": _pairs(self.delete), "add": _pairs(self.add), "keep": len(self.keep)}


def _pairs(m: dict[int, int]) -> list[list[int]]:
    return [[i, o] for i, o in sorted(m.items())]


def diff(current: dict[int, int], desired: dict[int, int]) -> CrossConnectDiff:
    """Minimal change set. A current cross-connect survives only if desired verbatim."""
    keep = {i: o for i, o in current.items() if desired.get(i) == o}
    delete = {i: o for i, o in current.items() if i not in keep}
    add = {i: o for i, o in desired.items() if i not in keep}
    return CrossConnectDiff(delete=delete, add=add, keep=keep)


@dataclass
class ApplyResult:
    diff: CrossConnectDiff
    readback: dict[int, int]
    verified: bool
    t_switch_ms: float  # commands sent → last change COMPLD
    t_verify_ms: float  # read-back
    commands: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"diff": self.diff.to_dict(), "verified": self.verified, "t_switch_ms": round(self.t_switch_ms, 3),
                "t_verify_ms": round(self.t_verify_ms, 3), "commands": self.commands}


class OCSDriver:
    """Drive one OCS described by an inventory ``ocs`` section.

    ``stream_factory(transport)`` opens a stream; by default serial/TCP/SSH streams from
    :mod:`mfctl.transport.streams`. Transports are tried in inventory order.
    """

    def __init__(self, ocs, *, base_dir: Path | None = None, known_hosts: str | None = None,
                 host_key_policy: str = "strict", connect_timeout: float = 10.0,
                 command_timeout: float = 10.0, journal: Journal | None = None):
        self.ocs = ocs
        self.base_dir = base_dir
        self.known_hosts = known_hosts or ocs.known_hosts or "~/.ssh/known_hosts"
        if base_dir is not None and not Path(self.known_hosts).expanduser().is_absolute():
            self.known_hosts = str(base_dir / self.known_hosts)
        self.host_key_policy = host_key_policy
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.journal = journal
        self.client: TL1Client | None = None
        self.endpoint: str | None = None
        self.size: tuple[int, int] | None = None

    # --- connection -------------------------------------------------------------------
    def _open(self, t):
        from mfctl.transport import streams
        from mfctl.transport.ssh import SSHTarget

        if t.kind == "serial":
            dev = t.device
            if self.base_dir is not None and "://" not in dev and not dev.startswith("/"):
                dev = str(self.base_dir / dev)
            return streams.SerialStream(dev, baudrate=t.baudrate, bytesize=t.bytesize, parity=t.parity,
                                        stopbits=t.stopbits, timeout=self.command_timeout)
        if t.kind == "tcp":
            return streams.TCPStream(t.address, t.port, connect_timeout=self.connect_timeout)
        target = SSHTarget(name=self.ocs.name, address=t.address, port=t.port, user=self.ocs.user,
                           password=self.ocs.password(self.base_dir) or None, agent=False,
                           known_hosts=self.known_hosts, host_key_policy=self.host_key_policy)
        return streams.SSHStream(target, connect_timeout=self.connect_timeout)

    def connect(self) -> "OCSDriver":
        """Open the first reachable transport, log in, read the switch size. Raises UnreachableError."""
        errors = []
        for t in self.ocs.transports:
            try:
                stream = self._open(t)
            except UnreachableError as e:
                errors.append(str(e))
                continue
            self.client = TL1Client(stream, command_timeout=self.command_timeout)
            self.endpoint = stream.name
            try:
                self._login()
            except TL1ConnectionError as e:
                errors.append(str(e))
                self.client.close()
                continue
            self.size = self.read_size()
            if self.size != (self.ocs.size.inputs, self.ocs.size.outputs):
                raise OperationFailed(f"OCS {self.ocs.name} reports size {self.size[0]}x{self.size[1]}, "
                                      f"inventory says {self.ocs.size.inputs}x{self.ocs.size.outputs}")
            log.info("OCS %s connected via %s", self.ocs.name, self.endpoint)
            return self
        raise UnreachableError(f"OCS {self.ocs.name}: no transport reachable: " + " | ".join(errors))

    def _login(self) -> None:
        pw = self.ocs.password(self.base_dir)
        self.client.command("ACT-USER", aid=self.ocs.user, params=pw)

    def reconnect(self) -> None:
        if self.client:
            self.client.close()
        self.connect()

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.command("CANC-USER", aid=self.ocs.user, timeout=2.0)
            except (TL1Deny, TL1ConnectionError, UnreachableError):
                pass
            self.client.close()
            self.client = None

    def __enter__(self) -> "OCSDriver":
        return self.connect() if self.client is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, verb: str, **kw) -> tl1.Reply:
        """A read-only command: on a dead link, reconnect and log in once, then retry."""
        try:
            return self.client.command(verb, **kw)
        except TL1ConnectionError:
            log.warning("OCS link lost during %s; reconnecting", verb)
            self.reconnect()
            return self.client.command(verb, **kw)

    # --- reads ------------------------------------------------------------------------
    def read_size(self) -> tuple[int, int]:
        r = self._read("RTRV-EQPT", aid="SYSTEM", params="PARAMETER=SIZE")
        for ln in r.lines:
            m = _SIZE_RE.search(ln)
            if m:
                return int(m.group(1)), int(m.group(2))
        raise OperationFailed(f"OCS {self.ocs.name}: RTRV-EQPT SIZE reply has no SIZE=NxM: {r.lines}")

    def cross_connects(self) -> dict[int, int]:
        """Read every cross-connect (RTRV-PATCH) as ``{input: output}``."""
        r = self._read("RTRV-PATCH")
        out: dict[int, int] = {}
        for ln in r.lines:
            m = _PATCH_RE.match(ln)
            if not m:
                raise OperationFailed(f"OCS {self.ocs.name}: RTRV-PATCH line {ln!r} is not 'in,out'")
            out[int(m.group(1))] = int(m.group(2))
        return out

    # --- changes ----------------------------------------------------------------------
    def apply(self, desired: dict[int, int], *, reason: str = "") -> ApplyResult:
        """Make the OCS hold exactly ``desired``: change only what differs, then read back.

        Journal records: ``ocs.intent`` (before/desired/diff), ``ocs.command`` for each
        command with its outcome, ``ocs.verify`` and ``ocs.outcome``.
        Raises :class:`OperationFailed` when the read-back differs from ``desired``
        (after the journal says so), TL1Deny when the device refuses a command.
        """
        current = self.cross_connects()
        d = diff(current, desired)
        j = self.journal
        if j:
            j.append("ocs.intent", ocs=self.ocs.name, reason=reason, before=_pairs(current),
                     desired=_pairs(desired), diff=d.to_dict())
        commands: list[str] = []
        t0 = time.monotonic()
        try:
            if d.delete:
                self._change(commands, "DLT-PATCH", tl1.format_aid(sorted(d.delete)))
            if d.add:
                ins = sorted(d.add)
                aid = f"{'&'.join(map(str, ins))},{'&'.join(str(d.add[i]) for i in ins)}"
                self._change(commands, "ENT-PATCH", aid)
        except (TL1Deny, TL1ConnectionError) as e:
            if j:
                j.append("ocs.outcome", ocs=self.ocs.name, ok=False, error=str(e))
            raise
        t_switch = (time.monotonic() - t0) * 1000
        t1 = time.monotonic()
        readback = self.cross_connects()
        t_verify = (time.monotonic() - t1) * 1000
        ok = readback == desired
        if j:
            j.append("ocs.verify", ocs=self.ocs.name, readback=_pairs(readback), matches=ok)
            j.append("ocs.outcome", ocs=self.ocs.name, ok=ok, t_switch_ms=round(t_switch, 3))
        res = ApplyResult(diff=d, readback=readback, verified=ok, t_switch_ms=t_switch, t_verify_ms=t_verify,
                          commands=commands)
        if not ok:
            missing = {i: o for i, o in desired.items() if readback.get(i) != o}
            extra = {i: o for i, o in readback.items() if desired.get(i) != o}
            raise OperationFailed(f"OCS {self.ocs.name}: read-back differs from plan: missing {_pairs(missing)}, "
                                  f"unexpected {_pairs(extra)}")
        return res

    def _change(self, commands: list[str], verb: str, aid: str) -> None:
        j = self.journal
        if j:
            j.append("ocs.command", ocs=self.ocs.name, verb=verb, aid=aid, state="sent")
        t = time.monotonic()
        try:
            self.client.command(verb, aid=aid)
        except TL1Deny as e:
            if j:
                j.append("ocs.command", ocs=self.ocs.name, verb=verb, aid=aid, state="denied", code=e.code)
            raise
        except TL1ConnectionError as e:
            if j:
                j.append("ocs.command", ocs=self.ocs.name, verb=verb, aid=aid, state="link-lost", error=str(e))
            raise
        commands.append(f"{verb}::{aid}")
        if j:
            j.append("ocs.command", ocs=self.ocs.name, verb=verb, aid=aid, state="COMPLD",
                     ms=round((time.monotonic() - t) * 1000, 3))



def driver_from_inventory(inv, *, journal: Journal | None = None, connect_timeout: float = 10.0,
                          command_timeout: float = 10.0) -> OCSDriver:
    """An (unconnected) driver for the inventory's OCS, with its SSH known_hosts settings."""
    return OCSDriver(inv.ocs, base_dir=inv.base_dir, known_hosts=inv.ocs.known_hosts or inv.ssh.known_hosts,
                     host_key_policy=inv.ssh.host_key_policy, connect_timeout=connect_timeout,
                     command_timeout=command_timeout, journal=journal)
