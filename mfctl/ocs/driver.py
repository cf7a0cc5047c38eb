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
from mfctl.ocs.identity import DeviceIdentity, WrongDevice, check_expected, parse_netype, parse_serial
from mfctl.ocs.journal import Journal

log = logging.getLogger(__name__)

_PATCH_RE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")
_PORT_VALUE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)\s*$")
PROBE_TIMEOUT_S = 2.0  # how long the SID probe waits before login (a device may answer nothing until then)
DARK_FLOOR_DBM = -50.0  # readings at or below this are "no light" (OPM floor class)
_SIZE_RE = re.compile(r"SIZE=(\d+)x(\d+)", re.I)


class Superseded(OperationFailed):
    """An unfinished change in this journal was overtaken by a later change journalled elsewhere."""


class UnconfirmedRead(OperationFailed):
    """The OCS's state could not be confirmed (inconsistent replies, or reads that disagree):
    nothing is decided on it."""


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
                 max_pairs_per_command: int = 64, retries: int = 2, read_attempts: int = 5):
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
        self.identity: DeviceIdentity | None = None
        self.device_lock = None  # mfctl.lock.DeviceLock while held (open_ocs)
        self.device_journal: Journal | None = None
        self.pending: dict | None = None  # the device's unfinished change (pending_apply), joined by apply()
        self.device_records: list[dict] = []  # the device journal as open_ocs read it (once per session)
        self.size: tuple[int, int] | None = None
        self.read_attempts = read_attempts
        #: the command that recovers this switch's unfinished change, as its errors say it (with several
        #: OCSes in the inventory it names this one: driver_from_inventory sets ``--ocs NAME``)
        self.recover_command = "mfctl ocs recover"

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
        """Open the first reachable transport, check the device's SID (before the password is
        sent), log in, read identity and switch size. Raises UnreachableError, WrongDevice."""
        self._credentials()  # a bad user or password is refused before anything is opened or sent
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
                sid = self._probe_sid()
                login = self._login()
                if sid is None:  # no answer before login: the login reply's header is the first word
                    sid = login.sid
                    check_expected(self.ocs, sid=sid, endpoint=self.endpoint)
                self.identity = self._identify(sid)
                # read directly, not through _read(): its reconnect would call connect() again, without end
                self.size = self._size(self.client.command("RTRV-EQPT", aid="SYSTEM", params="PARAMETER=SIZE"))
            except (TL1ConnectionError, TL1Timeout) as e:
                errors.append(str(e))
                self.client.close()
                continue
            except BaseException:
                self.client.close()
                self.client = None
                raise
            if self.size != (self.ocs.size.inputs, self.ocs.size.outputs):
                raise OperationFailed(f"OCS {self.ocs.name} reports size {self.size[0]}x{self.size[1]}, "
                                      f"inventory says {self.ocs.size.inputs}x{self.ocs.size.outputs}")
            log.info("OCS %s connected via %s (device %s)", self.ocs.name, self.endpoint, self.identity.key)
            return self
        raise UnreachableError(f"OCS {self.ocs.name}: no transport reachable: " + " | ".join(errors))

    def _probe_sid(self) -> str | None:
        """The SID of the response header of ``RTRV-HDR`` (answered, if only with ``PLNA``, before
        login). Checked against the inventory's ``ocs.sid`` before any password is sent. A device
        that says nothing before login (within ``PROBE_TIMEOUT_S``) gives None: its SID is then
        read from the login reply."""
        try:
            sid = self.client.command("RTRV-HDR", timeout=min(self.connect_timeout, PROBE_TIMEOUT_S)).sid
        except TL1Deny as e:
            sid = e.reply.sid
        except TL1Timeout:
            log.warning("OCS %s: no answer to RTRV-HDR before login; checking its SID from the login reply",
                        self.ocs.name)
            return None
        check_expected(self.ocs, sid=sid, endpoint=self.endpoint)
        return sid

    def _identify(self, sid: str) -> DeviceIdentity:
        """Vendor/model (``RTRV-NETYPE``) and serial (``RTRV-INV::OCS``); a device that refuses
        either is identified by SID and endpoint. Raises WrongDevice on a serial mismatch."""
        vendor = model = serial = None
        try:
            vendor, model = parse_netype(self.client.command("RTRV-NETYPE").lines)
        except TL1Deny:
            pass
        try:
            serial = parse_serial(self.client.command("RTRV-INV", aid="OCS").lines)
        except TL1Deny:
            pass
        check_expected(self.ocs, serial=serial, endpoint=self.endpoint)
        if self.identity is not None and self.identity.serial and self.identity.serial != serial:
            raise WrongDevice(f"OCS {self.ocs.name}: reconnected via {self.endpoint} to serial {serial!r}, "
                              f"not {self.identity.serial!r} as before: refusing to continue on another switch")
        return DeviceIdentity(sid=sid, endpoint=self.endpoint, serial=serial, vendor=vendor, model=model)

    def _credentials(self) -> str:
        """The password, with user and password checked against TL1's grammar (ConfigError naming
        the field, never the value) — before any connection is opened."""
        pw = self.ocs.password(self.base_dir)
        tl1.check_ident("ocs.user", self.ocs.user)
        src = f"${self.ocs.password_env}" if not self.ocs.password_file and self.ocs.password_env else "ocs.password_file"
        if pw:
            tl1.check_text(f"OCS password (from {src})", pw, secret=True)
        return pw

    def _login(self) -> tl1.Reply:
        """ACT-USER within the connect timeout; user and password are checked against TL1's
        grammar first (a reserved character is a ConfigError, never sent) and the password never
        reaches a log or error."""
        pw = self._credentials()
        return self.client.command("ACT-USER", aid=self.ocs.user, params=pw, secret=True, timeout=self.connect_timeout)

    def reconnect(self) -> None:
        if self.client:
            self.client.close()
        self.connect()

    def close(self) -> None:
        """Log out, close the link, release the device lock (if :func:`open_ocs` took one)."""
        try:
            if self.client is not None:
                try:
                    self.client.command("CANC-USER", aid=self.ocs.user, timeout=2.0)
                except (TL1Deny, TL1ConnectionError, UnreachableError):
                    pass
                self.client.close()
                self.client = None
        finally:
            lock, self.device_lock = self.device_lock, None
            if lock is not None:
                lock.__exit__(None, None, None)
            for j in self.journals:
                j.close()

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

    def read_cross_connects_once(self) -> dict[int, int]:
        """One ``RTRV-PATCH`` as ``{input: output}``, checked for consistency: every line
        ``in,out``, inputs within 1..N and outputs within N+1..N+M of this switch, no port twice.
        Raises :class:`UnconfirmedRead` on a reply that breaks any of these (a garbled wire)."""
        r = self._read("RTRV-PATCH")
        n, m = self.size or (self.ocs.size.inputs, self.ocs.size.outputs)
        out: dict[int, int] = {}
        seen_out: set[int] = set()
        for ln in r.lines:
            mt = _PATCH_RE.match(ln)
            if not mt:
                raise UnconfirmedRead(f"OCS {self.ocs.name}: RTRV-PATCH line {ln[:60]!r} is not 'in,out'")
            i, o = int(mt.group(1)), int(mt.group(2))
            if not (1 <= i <= n and n < o <= n + m):
                raise UnconfirmedRead(f"OCS {self.ocs.name}: RTRV-PATCH line {ln[:60]!r}: not input (1..{n}) -> "
                                      f"output ({n + 1}..{n + m})")
            if i in out or o in seen_out:
                raise UnconfirmedRead(f"OCS {self.ocs.name}: RTRV-PATCH lists port {i if i in out else o} twice")
            out[i] = o
            seen_out.add(o)
        return out

    def cross_connects(self) -> dict[int, int]:
        """Every cross-connect as ``{input: output}``, *confirmed*: read until two consecutive
        consistent reads agree (at most ``read_attempts`` reads; 2 on a clean wire). A read that
        decides anything — a change's ``before``, its read-back, a retry's target — comes from
        here, so a corrupted but well-formed reply is never acted on. Raises
        :class:`UnconfirmedRead` when no two reads agree."""
        prev: dict[int, int] | None = None
        problems: list[str] = []
        for _ in range(max(2, self.read_attempts)):
            try:
                cur = self.read_cross_connects_once()
            except UnconfirmedRead as e:
                problems.append(str(e))
                prev = None
                continue
            if prev is not None and cur == prev:
                return cur
            if prev is not None:
                problems.append(f"two reads disagree ({len(prev)} vs {len(cur)} cross-connects)")
                log.warning("OCS %s: two RTRV-PATCH reads disagree; reading again", self.ocs.name)
            prev = cur
        raise UnconfirmedRead(f"OCS {self.ocs.name}: no two of {max(2, self.read_attempts)} RTRV-PATCH reads agreed: "
                              + "; ".join(problems[-3:]))

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

    def apply(self, desired: dict[int, int], *, reason: str = "", chain: dict | None = None,
              closes: str | None = None) -> ApplyResult:
        """Make the OCS hold exactly ``desired``: change only what differs from a confirmed read,
        batched into as few commands as the device accepts (``max_pairs_per_command``), read back
        (confirmed), and retry only what did not take (``retries`` times).

        A change and its recoveries form one *chain* (:func:`pending_apply`). ``chain`` (a
        pending change as :func:`pending_apply` returns it) makes this apply a step of that chain,
        and ``closes`` (``complete``/``rollback``/``superseded``) ends the chain with
        ``ocs.recovered`` once the switch holds ``desired``. Without ``chain``, while a change of
        this device is pending (``self.pending``, read from its journal by :func:`open_ocs`), the
        apply joins that chain with ``desired`` as its new goal (``superseded``): a later rollback
        still returns to the original ``before``, never to the half-built state found now.

        Journal (every record with this apply's ``apply_id``): ``ocs.intent`` (before/desired/diff;
        in a chain also ``chain``, ``chain_before``, ``chain_desired``), ``ocs.command`` (sent, then
        COMPLD/denied/link-lost/timeout), ``ocs.retry``, ``ocs.verify``, ``ocs.outcome``.

        A ``DENY`` that leaves the switch changed rolls back at once to the confirmed ``before``
        (in the chain), then raises :class:`TL1Deny` saying so (``e.left``); if that fails too the
        change stays pending for ``mfctl ocs recover``. Every exception raised carries ``.chain``.
        Raises :class:`OperationFailed` when the read-back still differs after the retries."""
        current, d = self.plan(desired)
        if chain is None and self.pending is not None:
            if foreign(current, self.pending):  # the switch moved on since: that change is history
                log.warning("OCS %s: change %s did not finish, but the switch holds cross-connects neither of its "
                            "states has: not continuing it", self.ocs.name, self.pending["apply_id"])
            else:
                chain, closes = {**self.pending, "desired": _pairs(desired)}, "superseded"
                log.warning("OCS %s: change %s did not finish; this one continues it", self.ocs.name, chain["apply_id"])
        apply_id = uuid.uuid4().hex[:12]
        intent = {"apply_id": apply_id, "ocs": self.ocs.name, "reason": reason, "before": _pairs(current),
                  "desired": _pairs(desired), "diff": d.to_dict(),
                  "device": self.identity.key if self.identity else None}
        if chain:
            intent |= {"chain": chain["apply_id"], "chain_before": chain["before"], "chain_desired": chain["desired"]}
        self._journal("ocs.intent", **intent)
        if self.device_lock is not None and self.device_journal is not None:
            self.device_lock.note_change(apply_id, self.device_journal.path)
        this = dict(chain or {"apply_id": apply_id, "before": _pairs(current), "desired": _pairs(desired)})
        this["known"] = sorted({tuple(x) for x in this.get("known") or []} | set(current.items()) | set(desired.items()))
        self.pending = this  # until the outcome says otherwise
        commands: list[str] = []
        t0 = time.monotonic()
        readback = current
        try:
            self._execute(apply_id, d, commands, confirmed=current)
            t_switch = (time.monotonic() - t0) * 1000
            t1 = time.monotonic()
            readback = self.cross_connects()
            for attempt in range(1, self.retries + 1):
                if readback == desired:
                    break
                d2 = diff(readback, desired)
                self._journal("ocs.retry", apply_id=apply_id, ocs=self.ocs.name, attempt=attempt, diff=d2.to_dict())
                log.warning("OCS %s: read-back differs, retrying %d change(s)", self.ocs.name, len(d2.add) + len(d2.delete))
                self._execute(apply_id, d2, commands, confirmed=readback)
                readback = self.cross_connects()
            t_verify = (time.monotonic() - t1) * 1000
        except TL1Deny as e:
            e.chain = this  # the change to name in a later recovery (revert, recover)
            self._after_deny(e, apply_id, current, desired, fresh=chain is None)
            raise
        except (TL1ConnectionError, TL1Timeout, UnreachableError, UnconfirmedRead) as e:
            e.chain = this
            self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=False, error=str(e))
            raise
        ok = readback == desired
        self._journal("ocs.verify", apply_id=apply_id, ocs=self.ocs.name, readback=_pairs(readback), matches=ok, sync=False)
        # a good outcome is made durable by the next synced record: lost to a power cut, the change only
        # looks pending, and recovering it finds nothing to do (its desired state is on the switch)
        self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=ok, t_switch_ms=round(t_switch, 3), sync=not ok)
        res = ApplyResult(diff=d, readback=readback, verified=ok, t_switch_ms=t_switch, t_verify_ms=t_verify,
                          commands=commands, apply_id=apply_id)
        if not ok:
            missing = {i: o for i, o in desired.items() if readback.get(i) != o}
            extra = {i: o for i, o in readback.items() if desired.get(i) != o}
            err = OperationFailed(f"OCS {self.ocs.name}: read-back differs from plan after {self.retries} retries: "
                                  f"missing {_pairs(missing)}, unexpected {_pairs(extra)}; "
                                  f"run {self.recover_command} to finish or roll back")
            err.chain = this
            raise err
        if chain is None:
            self.pending = None
        elif closes:
            self.close_chain(chain, closes, readback, changed=not d.empty)
        return res

    def close_chain(self, chain: dict, mode: str, readback: dict[int, int], *, changed: bool = True) -> None:
        """Journal that the change ``chain`` is over (``ocs.recovered``: ``complete``, ``rollback``
        or ``superseded``) — only once a confirmed read shows the switch holding its target."""
        self._journal("ocs.recovered", apply_id=chain["apply_id"], ocs=self.ocs.name, mode=mode, changed=changed,
                      readback=_pairs(readback))
        self.pending = None

    def revert(self, chain: dict, *, reason: str = "") -> ApplyResult:
        """Roll the failed change ``chain`` (the ``.chain`` of an exception :meth:`apply` raised)
        back to its confirmed ``before``, as a recovery in its chain, and close the chain: one
        change, one history, whoever undoes it."""
        return self.apply({i: o for i, o in chain["before"]}, reason=reason or f"rollback of {chain['apply_id']}",
                          chain=chain, closes="rollback")

    def _after_deny(self, e: TL1Deny, apply_id: str, before: dict[int, int], desired: dict[int, int], *,
                    fresh: bool) -> None:
        """Journal a refused change's outcome; roll back to ``before`` when the switch no longer
        holds it (a fresh change: :meth:`revert`, closing it; a step of a chain: back to the state
        this step found, the chain staying pending). Amends ``e``'s message with where the OCS was
        left (``e.left``: ``unchanged``, ``rolled-back`` or ``unknown``)."""
        try:
            now = self.cross_connects()
        except (TL1Deny, TL1ConnectionError, TL1Timeout, UnreachableError, UnconfirmedRead):
            now = None
        unchanged = now == before if now is not None else None
        self._journal("ocs.outcome", apply_id=apply_id, ocs=self.ocs.name, ok=False, error=str(e), unchanged=unchanged)
        if unchanged and fresh:
            self.pending = None
        e.left = "unchanged" if unchanged else "unknown"
        if unchanged or now is None:
            if not unchanged:
                e.args = (f"{e.args[0]}; the OCS may be half-changed: run {self.recover_command}",)
            return
        log.warning("OCS %s: %s refused mid-change; rolling back to the state before", self.ocs.name, e.code)
        try:
            if fresh:
                self.revert(e.chain, reason=f"rollback of {apply_id} after {e.code}")
            else:
                self.apply(before, reason=f"rollback of {apply_id} after {e.code}", chain=e.chain)
        except (TL1Deny, TL1ConnectionError, TL1Timeout, UnreachableError, OperationFailed) as e2:
            e.args = (f"{e.args[0]}; the rollback failed too ({e2}): run {self.recover_command}",)
            return
        e.left = "rolled-back"
        e.args = (f"{e.args[0]}; rolled back: the OCS holds what it held before (confirmed read)",)

    def _execute(self, apply_id: str, d: CrossConnectDiff, commands: list[str], *, confirmed: dict[int, int]) -> None:
        """Send the diff: deletions first (they free ports), then additions, in batches.
        Only cross-connects that the confirmed read ``confirmed`` shows are ever deleted.
        A lost link or a timeout mid-command is survived: reconnect, and let the read-back
        decide what took."""
        stray = {i: o for i, o in d.delete.items() if confirmed.get(i) != o}
        if stray:
            raise OperationFailed(f"OCS {self.ocs.name}: refusing to delete {_pairs(stray)}: no confirmed read showed them")
        n = max(1, self.max_pairs_per_command)
        dels = sorted(d.delete)
        adds = sorted(d.add)
        batches = [("DLT-PATCH", tl1.format_aid(dels[k:k + n])) for k in range(0, len(dels), n)]
        for k in range(0, len(adds), n):
            ins = adds[k:k + n]
            batches.append(("ENT-PATCH", f"{'&'.join(map(str, ins))},{'&'.join(str(d.add[i]) for i in ins)}"))
        for verb, aid in batches:
            # written before the command goes out (it survives a kill); durable with the next synced
            # record — recovery needs only the synced intent (its before/desired) and a confirmed read
            self._journal("ocs.command", apply_id=apply_id, ocs=self.ocs.name, verb=verb, aid=aid, state="sent",
                          sync=False)
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
        """Remove every cross-connect that a confirmed read shows (``DLT-PATCH`` of exactly those
        ports, never ``ALL``: a cross-connect made meanwhile by someone else is not ours to cut),
        journalled and read back. Refuses unless ``confirm`` (it darkens every circuit)."""
        if not confirm:
            raise OperationFailed("refusing to delete ALL cross-connects without explicit confirmation")
        return self.apply({}, reason=reason or "disconnect all")


def _chains(records: list[dict]) -> tuple[dict | None, str | None]:
    """The last intent and the id of the change it belongs to (its own, or the one it recovers)."""
    last = next((r for r in reversed(records) if r.get("op") == "ocs.intent"), None)
    if last is None:
        return None, None
    return last, last.get("chain") or last.get("apply_id")


def pending_apply(records: list[dict]) -> dict | None:
    """The last journalled change, if it never reached a good outcome and was not recovered.

    A change and the recoveries of it form one chain (a recovery's intent names the change in
    ``chain`` and carries its ``before``/``desired``): the chain is pending until the change's own
    outcome is good (or it was refused and the switch read back unchanged) or an
    ``ocs.recovered`` record closes it. What is returned is always the *original* change: its
    ``apply_id``, ``reason``, ``before`` and ``desired``, with ``last_apply_id`` (the chain's last
    intent) and ``recoveries`` (how many recovery attempts began).

    Only the last chain can be pending: a later change read the device's confirmed state as
    its ``before``, so an older unfinished change is superseded, never resurrected."""
    last, root_id = _chains(records)
    if last is None:
        return None
    for r in records:
        if r.get("apply_id") != root_id:
            continue
        if r.get("op") == "ocs.recovered" or (r.get("op") == "ocs.outcome" and (r.get("ok") or r.get("unchanged"))):
            return None
    root = next((r for r in records if r.get("op") == "ocs.intent" and r.get("apply_id") == root_id), None)
    if last.get("chain"):
        before, desired = last.get("chain_before"), last.get("chain_desired")
    else:
        before, desired = last.get("before"), last.get("desired")
    steps = [r for r in records if r.get("op") == "ocs.intent" and (r.get("chain") or r.get("apply_id")) == root_id]
    known = sorted({tuple(x) for r in steps for k in ("before", "desired") for x in r.get(k) or []})
    return {"apply_id": root_id, "reason": (root or last).get("reason"), "ts": (root or last).get("ts"),
            "before": before, "desired": desired, "last_apply_id": last.get("apply_id"),
            "recoveries": len(steps) - (root is not None), "known": [list(x) for x in known], "op": "ocs.intent"}


class JournalDamaged(OperationFailed):
    """The journal cannot tell whether a change is unfinished: records after its last readable
    change are damaged, or belong to a change whose intent is unreadable."""


def journal_problems(records: list[dict]) -> list[dict]:
    """The records after the last readable ``ocs.intent`` that make its ending unknowable: damaged
    ones (``corrupt``/``torn``) and those of a change whose intent is not readable (orphans)."""
    last = max((k for k, r in enumerate(records) if r.get("op") == "ocs.intent"), default=-1)
    intents = {r.get("apply_id") for r in records if r.get("op") == "ocs.intent"}
    return [r for r in records[last + 1:]
            if r.get("op") in ("corrupt", "torn") or (r.get("apply_id") is not None and r.get("apply_id") not in intents)]


def check_journal_readable(records: list[dict], driver: "OCSDriver | None" = None) -> None:
    """Raise :class:`JournalDamaged` when no change is pending *as far as the journal can be read*
    but :func:`journal_problems` finds records that might be one, or the device's latest change
    (noted beside its lock) was journalled here and is gone from it (cut off at a record
    boundary): "nothing to recover" is never said over a journal that cannot tell."""
    lock = getattr(driver, "device_lock", None)
    last = lock.last_change() if lock is not None else None
    journal = getattr(getattr(driver, "device_journal", None), "path", None)
    if (last and journal is not None and last.get("journal") == str(journal)
            and last["apply_id"] not in {r.get("apply_id") for r in records if r.get("op") == "ocs.intent"}):
        raise JournalDamaged(f"the OCS journal {journal} has lost the device's latest change ({last['apply_id']}, noted "
                             f"beside its lock): it cannot tell whether that change finished. Check the switch (mfctl "
                             f"ocs show) and set the state you want (mfctl ocs apply).")
    bad = journal_problems(records)
    if bad and pending_apply(records) is None:
        seqs = [str(r.get("seq")) for r in bad if r.get("seq") is not None]
        raise JournalDamaged(f"the OCS journal has {len(bad)} damaged or orphaned record(s) after its last readable "
                             f"change{' (seq ' + ', '.join(seqs[:8]) + ')' if seqs else ''}: it cannot tell whether a "
                             f"change is unfinished. Check the switch (mfctl ocs show) and set the state you want "
                             f"(mfctl ocs apply); a completed change makes the journal readable again.")


def foreign(current: dict[int, int], chain: dict) -> dict[int, int]:
    """The cross-connects of ``current`` in neither the ``before`` nor the ``desired`` of the
    change ``chain``, nor of any step of it (``known``). Mid-change the switch only ever holds a
    mix of these (deletions of one, additions of another), so any other cross-connect was made
    by someone else since."""
    allowed = {tuple(x) for k in ("before", "desired", "known") for x in chain.get(k) or []}
    return {i: o for i, o in current.items() if (i, o) not in allowed}


def last_verified(records: list[dict]) -> dict[int, int] | None:
    """The switch's state as the journal last verified it (the latest read-back), or None."""
    for r in reversed(records):
        if r.get("op") in ("ocs.verify", "ocs.recovered") and r.get("readback") is not None:
            return {i: o for i, o in r["readback"]}
    return None


def check_not_superseded(driver: "OCSDriver", pending: dict, records: list[dict]) -> None:
    """Raise :class:`Superseded` when the device's latest change (noted beside its lock, shared by
    every state directory) is not in ``records``: a journal elsewhere changed the switch after
    this unfinished change, and finishing or undoing it now would undo that newer change."""
    lock = getattr(driver, "device_lock", None)
    last = lock.last_change() if lock is not None else None
    if last is None:
        return
    ours = {r.get("apply_id") for r in records if r.get("op") == "ocs.intent"}
    if last["apply_id"] not in ours:
        raise Superseded(f"OCS {driver.ocs.name}: change {pending['apply_id']} ({pending.get('reason')}) did not "
                         f"finish, but the switch was changed after it (change {last['apply_id']}, journalled in "
                         f"{last.get('journal')}): recovering it would undo that; nothing was done. Check the switch "
                         f"(mfctl ocs show) and set the state you want (mfctl ocs apply).")


def recover(driver: "OCSDriver", records: list[dict], *, mode: str = "complete", dry_run: bool = False) -> dict:
    """Finish (``complete``: the original change's ``desired``) or undo (``rollback``: its
    ``before``) the last interrupted change found in ``records``, however many recoveries of it
    were themselves interrupted. Returns what was found and done — the target, the diff to it from
    a confirmed read (``diff``: :meth:`CrossConnectDiff.to_dict`, what ``mfctl ocs recover`` shows
    before it asks), and after a change the confirmed read-back; journals ``ocs.recovered`` only
    once the switch holds the target.

    With nothing pending: raises JournalDamaged when the journal cannot tell
    (:func:`check_journal_readable`), else returns ``action: none`` with whether the switch differs
    from the state the journal last verified (``differs_from_last_verified``, ``differing``
    cross-connects: changed by something else since)."""
    if mode not in ("complete", "rollback"):
        raise ValueError(f"mode must be complete or rollback, not {mode!r}")
    p = pending_apply(records)
    if p is None:
        check_journal_readable(records, driver)
        seen, now = last_verified(records), driver.cross_connects()
        differing = len(set(seen.items()) ^ set(now.items())) if seen is not None else 0
        return {"pending": None, "action": "none", "differs_from_last_verified": differing > 0, "differing": differing}
    check_not_superseded(driver, p, records)
    target = {i: o for i, o in (p["desired"] if mode == "complete" else p["before"])}
    current, d = driver.plan(target)
    other = foreign(current, p)
    if other:
        raise Superseded(f"OCS {driver.ocs.name}: change {p['apply_id']} ({p.get('reason')}) did not finish, but the "
                         f"switch holds {len(other)} cross-connect(s) that neither its state before nor its desired "
                         f"state has ({_pairs(other)[:4]}{'…' if len(other) > 4 else ''}): it was changed since, by "
                         f"someone else; recovering would undo that. Nothing was done: check the switch (mfctl ocs "
                         f"show) and set the state you want (mfctl ocs apply).")
    out = {"pending": {"apply_id": p["apply_id"], "reason": p.get("reason"), "ts": p.get("ts"),
                       "recoveries": p["recoveries"], "last_apply_id": p["last_apply_id"]},
           "mode": mode, "target": _pairs(target), "current": _pairs(current),
           "diff": d.to_dict(), "action": "dry-run" if dry_run else ("none" if d.empty else "apply")}
    if dry_run:
        return out
    readback = current
    if not d.empty:
        res = driver.apply(target, reason=f"recover ({mode}) of {p['apply_id']}", chain=p, closes=mode)
        out["result"] = res.to_dict()
        readback = res.readback
    else:
        driver.close_chain(p, mode, readback, changed=False)
    out["readback"] = _pairs(readback)
    out["matches"] = readback == target
    return out


def driver_from_inventory(inv, *, journal: Journal | None = None, connect_timeout: float = 10.0,
                          command_timeout: float = 10.0, ocs: str | None = None) -> OCSDriver:
    """An (unconnected) driver for the inventory's OCS named ``ocs`` (a UsageError naming them
    when it has none of that name; None: the only one, a ConfigError when there are several),
    with its SSH known_hosts settings."""
    o = inv.ocs if ocs is None else inv.ocs_named(ocs)
    drv = OCSDriver(o, base_dir=inv.base_dir, known_hosts=o.known_hosts or inv.ssh.known_hosts,
                    host_key_policy=inv.ssh.host_key_policy, connect_timeout=connect_timeout,
                    command_timeout=command_timeout, journal=journal,
                    max_pairs_per_command=o.max_pairs_per_command)
    drv.recover_command = recover_command(inv, o.name)
    return drv


def recover_command(inv, ocs: str | None = None) -> str:
    """``mfctl ocs recover -i INVENTORY [--ocs NAME]`` for the OCS named ``ocs`` of ``inv``: with
    several OCSes ``--ocs`` is required, so a hint without it would be a usage error."""
    import shlex

    cmd = "mfctl ocs recover" + (f" -i {shlex.quote(inv.source)}" if inv.source else "")
    return cmd + (f" --ocs {ocs}" if ocs and len(inv.ocses) > 1 else "")


def open_ocs(inv, *, purpose: str | None = None, journals: list[Journal] | tuple = (),
             connect_timeout: float = 10.0, command_timeout: float = 10.0, ocs: str | None = None) -> OCSDriver:
    """A connected driver for the inventory's OCS named ``ocs`` (None: the only one) with the
    device's own journal attached
    (``driver.device_journal``, keyed by its identity: :func:`mfctl.ocs.identity.journal_path`)
    after ``journals``; with ``purpose`` (a change is coming) also the device lock, held until
    :meth:`OCSDriver.close`. Raises LockError (exit 5) when another mfctl holds the device,
    whatever inventory, state directory or transport it came through."""
    from mfctl.lock import DeviceLock
    from mfctl.ocs.identity import journal_path

    drv = driver_from_inventory(inv, connect_timeout=connect_timeout, command_timeout=command_timeout, ocs=ocs).connect()
    try:
        if purpose is not None:
            drv.device_lock = DeviceLock(drv.identity.key, purpose).__enter__()
        drv.device_journal = Journal(journal_path(drv.identity))
        drv.journals = [*journals, drv.device_journal]
        if purpose is not None:
            recs = drv.device_records = drv.device_journal.records()
            drv.pending = pending_apply(recs)
            if drv.pending is None and not journal_problems(recs):
                drv.device_journal.rotate_if_large()
            if drv.pending is not None:
                try:
                    check_not_superseded(drv, drv.pending, recs)
                except Superseded as e:  # overtaken elsewhere: it is history, not ours to continue
                    log.warning("%s", e)
                    drv.pending = None
    except BaseException:
        drv.close()
        raise
    return drv
