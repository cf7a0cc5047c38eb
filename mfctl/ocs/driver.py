"""Polatis-style OCS driver: cross-connect read, minimal-diff apply, read-back, journal.

A *cross-connect* is one-way: OCS input port ``in`` (fed by a lane's TX) → output port
``out`` (wired to a lane's RX). A duplex circuit is two cross-connects (DESIGN §2).
Cross-connect maps are ``dict[int, int]`` (input port → output port).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from mfctl.errors import ConfigError, OperationFailed, UnreachableError
from mfctl.ocs import tl1
from mfctl.ocs.client import TL1Client, TL1ConnectionError, TL1Deny, TL1Partial, TL1Timeout
from mfctl.ocs.journal import Journal

log = logging.getLogger(__name__)

_PATCH_RE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")
_PORT_VALUE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)\s*$")
DARK_FLOOR_DBM = -50.0  # readings at or below this are "no light" (OPM floor class)
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
    apply_id: str = ""

    def to_dict(self) -> dict:
        return {"apply_id": self.apply_id, "diff": self.diff.to_dict(), "verified": self.verified,
                "readback": _pairs(self.readback), "t_switch_ms": round(self.t_switch_ms, 3),
                "t_verify_ms": round(self.t_verify_ms, 3), "commands": self.commands}


class OCSDriver:
    """Drive one OCS described by an inventory ``ocs`` section.

    ``stream_factory(transport)`` opens a stream; by default serial/TCP/SSH streams from
    :mod:`mfctl.transport.streams`. Transports are tried in inventory order.
    """

    def __init__(self, ocs, *, base_dir: Path | None = None, known_hosts: str | None = None,
                 host_key_policy: str = "strict", connect_timeout: float = 10.0,
                 command_timeout: float = 10.0, journal: Journal | list[Journal] | None = None,
                 max_pairs_per_command: int = 64, retries: int = 2):
        self.ocs = ocs
        self.base_dir = base_dir
        self.known_hosts = known_hosts or ocs.known_hosts or "~/.ssh/known_hosts"
        if base_dir is not None and not Path(self.known_hosts).expanduser().is_absolute():
            self.known_hosts = str(base_dir / self.known_hosts)
        self.host_key_policy = host_key_policy
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.journals: list[Journal] = journal if isinstance(journal, list) else ([journal] if journal else [])
        self.max_pairs_per_command = max_pairs_per_command
        self.retries = retries
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
                # read directly, not through _read(): its reconnect would call connect() again, without end
                self.size = self._size(self.client.command("RTRV-EQPT", aid="SYSTEM", params="PARAMETER=SIZE"))
            except (TL1ConnectionError, TL1Timeout) as e:
                errors.append(str(e))
                self.client.close()
                continue
            if self.size != (self.ocs.size.inputs, self.ocs.size.outputs):
                raise OperationFailed(f"OCS {self.ocs.name} reports size {self.size[0]}x{self.size[1]}, "
                                      f"inventory says {self.ocs.size.inputs}x{self.ocs.size.outputs}")
            log.info("OCS %s connected via %s", self.ocs.name, self.endpoint)
            return self
        raise UnreachableError(f"OCS {self.ocs.name}: no transport reachable: " + " | ".join(errors))

    def _login(self) -> None:
        """ACT-USER within the connect timeout; the password never reaches a log or error."""
        pw = self.ocs.password(self.base_dir)
        self.client.command("ACT-USER", aid=self.ocs.user, params=pw, secret=True, timeout=self.connect_timeout)

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
        """A read-only command. On a dead link: reconnect, log in, retry once. On
        ``PLNA`` (the session was logged out, e.g. an idle timeout): log in, retry once."""
        if self.client is None:
            self.connect()
        try:
            return self.client.command(verb, **kw)
        except (TL1ConnectionError, TL1Timeout) as e:
            log.warning("OCS %s: %s during %s; reconnecting", self.ocs.name, type(e).__name__, verb)
            self.reconnect()
            return self.client.command(verb, **kw)
        except TL1Deny as e:
            if e.code != "PLNA":
                raise
            log.warning("OCS %s: session logged out; logging in again", self.ocs.name)
            self._login()
            return self.client.command(verb, **kw)

    def keepalive(self) -> None:
        """A harmless command (RTRV-HDR) that keeps the session from idling out."""
        self._read("RTRV-HDR")

    # --- reads ------------------------------------------------------------------------
    def read_size(self) -> tuple[int, int]:
        """The switch size ``(inputs, outputs)`` from ``RTRV-EQPT::SYSTEM``."""
        return self._size(self._read("RTRV-EQPT", aid="SYSTEM", params="PARAMETER=SIZE"))

    def _size(self, r: tl1.Reply) -> tuple[int, int]:
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

    def _port_values(self, verb: str, ports: list[int] | None) -> dict[int, str]:
        aid = tl1.format_aid(sorted(ports)) if ports else f"1&&{self.ocs.size.total}"
        r = self._read(verb, aid=aid)
        out = {}
        for ln in r.lines:
            m = _PORT_VALUE_RE.match(ln)
            if not m:
                raise OperationFailed(f"OCS {self.ocs.name}: {verb} line {ln!r} is not 'port:value'")
            out[int(m.group(1))] = m.group(2)
        return out

    def power(self, ports: list[int] | None = None) -> dict[int, float | None]:
        """Optical power per port in dBm (RTRV-PORT-POWER). ``None`` when the OCS reports no
        reading (a non-numeric value, or at/below ``DARK_FLOOR_DBM``: no light)."""
        out: dict[int, float | None] = {}
        for p, v in self._port_values("RTRV-PORT-POWER", ports).items():
            try:
                x = float(v)
            except ValueError:
                out[p] = None
                continue
            out[p] = None if x <= DARK_FLOOR_DBM else x
        return out

    def shutters(self, ports: list[int] | None = None) -> dict[int, str]:
        """``OPEN`` / ``CLOSED`` per port (RTRV-PORT-SHUTTER)."""
        return self._port_values("RTRV-PORT-SHUTTER", ports)

    def alarms(self, wait_s: float = 0.0) -> dict:
        """Standing conditions (RTRV-ALM-ALL) and the autonomous messages received so far
        (plus any arriving within ``wait_s``), with ATAG gaps."""
        standing = self._read("RTRV-ALM-ALL").lines
        auto = self.client.drain(wait_s)
        return {"standing": standing,
                "autonomous": [{"almcde": a.almcde.strip(), "atag": a.atag, "verb": a.verb, "lines": a.lines} for a in auto],
                "atag_gaps": [list(g) for g in self.client.atag_gaps]}

    # --- changes ----------------------------------------------------------------------
    def _journal(self, op: str, *, sync: bool = True, **fields) -> None:
        for j in self.journals:
            j.append(op, sync=sync, **fields)

    def plan(self, desired: dict[int, int]) -> tuple[dict[int, int], CrossConnectDiff]:
        """Read the OCS and return ``(current, diff to desired)`` without changing anything."""
        self._check_ports(desired)
        current = self.cross_connects()
        return current, diff(current, desired)

    def _check_ports(self, desired: dict[int, int]) -> None:
        n, m = self.ocs.size.inputs, self.ocs.size.outputs
        outs = list(desired.values())
        if len(set(outs)) != len(outs):
            dup = next(o for o in outs if outs.count(o) > 1)
            raise ConfigError(f"output port {dup} is used by more than one cross-connect")
        for i, o in desired.items():
            if not (1 <= i <= n and n < o <= n + m):
                raise ConfigError(f"cross-connect {i}->{o} is not input (1..{n}) -> output ({n + 1}..{n + m})")

    def apply(self, desired: dict[int, int], *, reason: str = "") -> ApplyResult:
        """Make the OCS hold exactly ``desired``: change only what differs, batched into as
        few commands as the device accepts (``max_pairs_per_command``), read back, and retry
        only what did not take (``retries`` times).

        Journal (every record fsync'd, all with the same ``apply_id``): ``ocs.intent``
        (before/desired/diff), ``ocs.command`` (sent, then COMPLD/denied/link-lost/timeout),
        ``ocs.retry``, ``ocs.verify``, ``ocs.outcome``. Raises :class:`TL1Deny` when the
        device refuses, :class:`OperationFailed` when the read-back still differs.
        """
        current, d = self.plan(desired)
        apply_id = uuid.uuid4().hex[:12]
        self._journal("ocs.intent", apply_id=apply_id, ocs=self.ocs.name, reason=reason, before=_pairs(current),
                      desired=_pairs(desired), diff=d.to_dict())
        commands: list[str] = []
        t0 = time.monotonic()
        readback = current
        try:
            self._execute(apply_id, d, commands)
            t_switch = (time.monotonic() - t0) * 1000
            t1 = time.monotonic()
            readback = self.cross_connects()
            for attempt in range(1, self.retries + 1):
                if readback == desired:
                    break
                d2 = diff(readback, desired)
                self._journal("ocs.retry", apply_id=apply_id, attempt=attempt, diff=d2.to_dict())
                log.warning("OCS %s: read-back differs, retrying %d change(s)", self.ocs.name, len(d2.add) + len(d2.delete))
                self._execute(apply_id, d2, commands)
                readback = self.cross_connects()
            t_verify = (time.monotonic() - t1) * 1000
        except TL1Deny as e:
            # the switch refused: if it still holds what it held before, the change is over (nothing to recover)
            unchanged = None
            try:
                unchanged = self.cross_connects() == current
            except (TL1Deny, TL1ConnectionError, TL1Timeout, UnreachableError):
                pass
            self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=False, error=str(e), unchanged=unchanged)
            raise
        except (TL1ConnectionError, TL1Timeout) as e:
            self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=False, error=str(e))
            raise
        ok = readback == desired
        self._journal("ocs.verify", apply_id=apply_id, ocs=self.ocs.name, readback=_pairs(readback), matches=ok, sync=False)
        self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=ok, t_switch_ms=round(t_switch, 3))
        res = ApplyResult(diff=d, readback=readback, verified=ok, t_switch_ms=t_switch, t_verify_ms=t_verify,
                          commands=commands, apply_id=apply_id)
        if not ok:
            missing = {i: o for i, o in desired.items() if readback.get(i) != o}
            extra = {i: o for i, o in readback.items() if desired.get(i) != o}
            raise OperationFailed(f"OCS {self.ocs.name}: read-back differs from plan after {self.retries} retries: "
                                  f"missing {_pairs(missing)}, unexpected {_pairs(extra)}")
        return res

    def _execute(self, apply_id: str, d: CrossConnectDiff, commands: list[str]) -> None:
        """Send the diff: deletions first (they free ports), then additions, in batches.
        A lost link or a timeout mid-command is survived: reconnect, and let the read-back
        decide what took."""
        n = max(1, self.max_pairs_per_command)
        dels = sorted(d.delete)
        adds = sorted(d.add)
        batches = [("DLT-PATCH", tl1.format_aid(dels[k:k + n])) for k in range(0, len(dels), n)]
        for k in range(0, len(adds), n):
            ins = adds[k:k + n]
            batches.append(("ENT-PATCH", f"{'&'.join(map(str, ins))},{'&'.join(str(d.add[i]) for i in ins)}"))
        for verb, aid in batches:
            self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb=verb, aid=aid, state="sent")
            t = time.monotonic()
            try:
                self.client.command(verb, aid=aid)
            except TL1Deny as e:
                self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb=verb, aid=aid,
                              state="partial" if isinstance(e, TL1Partial) else "denied", code=e.code,
                              reply=e.reply.lines + e.reply.comments)
                raise
            except (TL1ConnectionError, TL1Timeout) as e:
                state = "timeout" if isinstance(e, TL1Timeout) else "link-lost"
                self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb=verb, aid=aid, state=state,
                              error=str(e))
                log.warning("OCS %s: %s during %s; reconnecting, the read-back decides", self.ocs.name, state, verb)
                self.reconnect()
                return
            commands.append(f"{verb}::{aid}")
            self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb=verb, aid=aid, state="COMPLD",
                          ms=round((time.monotonic() - t) * 1000, 3), sync=False)

    def disconnect_all(self, *, confirm: bool = False, reason: str = "") -> ApplyResult:
        """Remove every cross-connect with ``DLT-PATCH::ALL``, journalled and read back.
        Refuses unless ``confirm`` (it darkens every circuit on the switch)."""
        if not confirm:
            raise OperationFailed("refusing to delete ALL cross-connects without explicit confirmation")
        current, d = self.plan({})
        apply_id = uuid.uuid4().hex[:12]
        self._journal("ocs.intent", apply_id=apply_id, ocs=self.ocs.name, reason=reason or "disconnect all",
                      before=_pairs(current), desired=[], diff=d.to_dict())
        t0 = time.monotonic()
        self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb="DLT-PATCH", aid="ALL", state="sent")
        try:
            self.client.command("DLT-PATCH", aid="ALL")
        except (TL1Deny, TL1ConnectionError, TL1Timeout) as e:
            self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=False, error=str(e))
            raise
        t_switch = (time.monotonic() - t0) * 1000
        readback = self.cross_connects()
        ok = readback == {}
        self._journal("ocs.verify", apply_id=apply_id, ocs=self.ocs.name, readback=_pairs(readback), matches=ok, sync=False)
        self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=ok, t_switch_ms=round(t_switch, 3))
        if not ok:
            raise OperationFailed(f"OCS {self.ocs.name}: cross-connects remain after DLT-PATCH::ALL: {_pairs(readback)}")
        return ApplyResult(diff=d, readback=readback, verified=True, t_switch_ms=t_switch, t_verify_ms=0.0,
                           commands=["DLT-PATCH::ALL"], apply_id=apply_id)


def pending_apply(records: list[dict]) -> dict | None:
    """The last journalled change, if it never reached a good outcome and was not recovered
    (a change the switch refused and that left it as it was is over, not pending).

    Only the last intent can be pending: a later change read the device's real state as
    its ``before``, so an older unfinished change is superseded, never resurrected."""
    last = next((r for r in reversed(records) if r.get("op") == "ocs.intent"), None)
    if last is None:
        return None
    aid = last.get("apply_id")
    done = any(r.get("apply_id") == aid and ((r.get("op") == "ocs.outcome" and (r.get("ok") or r.get("unchanged")))
                                             or r.get("op") == "ocs.recovered")
               for r in records)  # refused with the switch read back unchanged: over, nothing to finish
    if done:
        return None
    return last


def recover(driver: "OCSDriver", records: list[dict], *, mode: str = "complete", dry_run: bool = False) -> dict:
    """Finish (``complete``) or undo (``rollback``) the last interrupted apply found in
    ``records``. Returns what was found and done; journals ``ocs.recovered``."""
    if mode not in ("complete", "rollback"):
        raise ValueError(f"mode must be complete or rollback, not {mode!r}")
    p = pending_apply(records)
    if p is None:
        return {"pending": None, "action": "none"}
    target = {i: o for i, o in (p["desired"] if mode == "complete" else p["before"])}
    current, d = driver.plan(target)
    out = {"pending": {"apply_id": p["apply_id"], "reason": p.get("reason"), "ts": p.get("ts")}, "mode": mode,
           "diff": d.to_dict(), "action": "dry-run" if dry_run else ("none" if d.empty else "apply")}
    if dry_run:
        return out
    if not d.empty:
        res = driver.apply(target, reason=f"recover ({mode}) of {p['apply_id']}")
        out["result"] = res.to_dict()
    driver._journal("ocs.recovered", apply_id=p["apply_id"], mode=mode, changed=not d.empty)
    return out


def driver_from_inventory(inv, *, journal: Journal | None = None, connect_timeout: float = 10.0,
                          command_timeout: float = 10.0) -> OCSDriver:
    """An (unconnected) driver for the inventory's OCS, with its SSH known_hosts settings."""
    return OCSDriver(inv.ocs, base_dir=inv.base_dir, known_hosts=inv.ocs.known_hosts or inv.ssh.known_hosts,
                     host_key_policy=inv.ssh.host_key_policy, connect_timeout=connect_timeout,
                     command_timeout=command_timeout, journal=journal,
                     max_pairs_per_command=inv.ocs.max_pairs_per_command)
