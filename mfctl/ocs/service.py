"""Operator-level OCS operations on top of the driver: name ports by lane, build desired
states for connect/disconnect/apply, and judge per-port optical power.

Endpoints: an OCS port number (``17``), or a lane named ``HOST/NIC.LANE`` (``gpu01/nic0.0``;
``gpu01/nic0`` means lane 0). Two lanes of two different servers make a duplex circuit (two
cross-connects); two port numbers make one cross-connect ``input → output``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mfctl.errors import ConfigError, UsageError
from mfctl.fabric.mapping import LaneRef, region_lanes

_LANE_RE = re.compile(r"(?P<host>[A-Za-z0-9_.-]+)/(?P<nic>[A-Za-z0-9_-]+)(?:\.(?P<lane>[0-9]+))?")
_PORT_RE = re.compile(r"-?[0-9]+")  # ASCII digits only: str.isdigit() also takes '１', '²', '١'


def _is_port(text: str) -> bool:
    return _PORT_RE.fullmatch(text) is not None


@dataclass
class PortMap:
    """Which lane each OCS port belongs to (from the inventory)."""

    by_tx: dict[int, LaneRef]
    by_rx: dict[int, LaneRef]
    by_key: dict[str, LaneRef]
    rx_sensitivity: dict[int, float]
    inputs: int = 0
    outputs: int = 0
    inventory: str = ""  #: the inventory's name (a saved topo plan names the one it was made for)
    ocs: str = ""  #: the OCS's inventory name (its ports are numbered on it alone)
    #: the lanes of the inventory's other OCSes: lane key → that OCS's name (to say where a lane named here is)
    elsewhere: dict[str, str] = field(default_factory=dict)
    #: each region on this OCS → the ports of its lanes (tx and rx): what a region's plan governs
    region_ports: dict[str, frozenset[int]] = field(default_factory=dict)

    def check_port(self, p: int, role: str | None = None) -> int:
        """Raise UsageError unless ``p`` is a port of this switch (of ``role``: input/output)."""
        n, m = self.inputs, self.outputs
        ok = {"input": 1 <= p <= n, "output": n < p <= n + m, None: 1 <= p <= n + m}[role]
        if not ok:
            rng = {"input": f"1..{n}", "output": f"{n + 1}..{n + m}", None: f"1..{n + m}"}[role]
            raise UsageError(f"port {p} is not {'an ' + role if role else 'a'} port of this {n}x{m} switch ({rng})")
        return p

    @classmethod
    def from_inventory(cls, inv, ocs: str | None = None) -> "PortMap":
        """The ports of the OCS named ``ocs`` (None: the only one; UsageError when there are
        several) and the lanes of the hosts whose region is on it."""
        o = inv.ocs_named(ocs)
        hosts = [h.name for h in inv.hosts if (on := inv.ocs_of_host(h.name)) is not None and on.name == o.name]
        lanes = region_lanes(inv, hosts)
        flat = [lane for ls in lanes.values() for lane in ls]
        sens = {}
        for hn in hosts:
            for nic, lane in inv.host(hn).ocs_lanes():
                sens[lane.ocs_rx] = nic.rx_sensitivity_dbm
        others = [h.name for h in inv.hosts if (on := inv.ocs_of_host(h.name)) is not None and on.name != o.name]
        elsewhere = {lane.key: on.name for hn in others if (on := inv.ocs_of_host(hn)) is not None
                     for ls in region_lanes(inv, [hn]).values() for lane in ls}
        region_ports = {r.name: frozenset(p for ls in region_lanes(inv, r.hosts).values() for lane in ls
                                          for p in (lane.ocs_tx, lane.ocs_rx))
                        for r in inv.regions if all(h in hosts for h in r.hosts)}
        return cls({lane.ocs_tx: lane for lane in flat}, {lane.ocs_rx: lane for lane in flat},
                   {lane.key: lane for lane in flat}, sens,
                   o.size.inputs, o.size.outputs, inv.name, o.name, elsewhere, region_ports)

    def lane(self, ref: str) -> LaneRef:
        m = _LANE_RE.fullmatch(ref)
        if not m:
            raise UsageError(f"{ref!r} is neither an OCS port number nor a lane HOST/NIC[.LANE]")
        key = f"{m['host']}/{m['nic']}.{m['lane'] or 0}"
        if key not in self.by_key:
            if key in self.elsewhere:
                raise UsageError(f"no optical lane {key!r} on OCS {self.ocs}: it is on {self.elsewhere[key]} "
                                 f"(--ocs {self.elsewhere[key]})")
            raise UsageError(f"no optical lane {key!r} on OCS {self.ocs} in the inventory" if self.ocs
                             else f"no optical lane {key!r} in the inventory")
        return self.by_key[key]

    def name(self, port: int) -> str:
        lane = self.by_tx.get(port) or self.by_rx.get(port)
        if lane is None:
            return "(not in inventory)"
        return f"{lane.key} {'tx' if port == lane.ocs_tx else 'rx'}"


def parse_endpoint(pm: PortMap, text: str, role: str | None = None) -> int | LaneRef:
    if _is_port(text):
        return pm.check_port(int(text), role)
    return pm.lane(text)


def cross_connects_for(pm: PortMap, a: str, b: str) -> dict[int, int]:
    """The cross-connects that ``connect a b`` makes."""
    if _is_port(a) and _is_port(b):
        return {parse_endpoint(pm, a, "input"): parse_endpoint(pm, b, "output")}
    ea, eb = parse_endpoint(pm, a), parse_endpoint(pm, b)
    if isinstance(ea, LaneRef) and isinstance(eb, LaneRef):
        if ea.key == eb.key:
            raise UsageError("a circuit needs two different lanes")
        if ea.host == eb.host:  # a loopback carries no traffic between servers (two port numbers still make one)
            raise UsageError(f"a circuit joins two different servers: {ea.key} and {eb.key} are both on {ea.host}")
        return {ea.ocs_tx: eb.ocs_rx, eb.ocs_tx: ea.ocs_rx}
    raise UsageError("give two port numbers (one cross-connect) or two lanes (a duplex circuit), not one of each")


def with_connection(current: dict[int, int], new: dict[int, int], *, replace: bool = False) -> dict[int, int]:
    """``current`` plus ``new``; a port already used elsewhere is an error unless ``replace``."""
    desired = dict(current)
    used_out = {o: i for i, o in current.items()}
    for i, o in new.items():
        clash = []
        if i in current and current[i] != o:
            clash.append(f"input {i} is connected to {current[i]}")
        if o in used_out and used_out[o] != i:
            clash.append(f"output {o} is fed by {used_out[o]}")
        if clash and not replace:
            raise UsageError("; ".join(clash) + " (disconnect first, or use --replace)")
        if o in used_out and used_out[o] != i:
            desired.pop(used_out[o], None)
        desired[i] = o
    return desired


def without(pm: PortMap, current: dict[int, int], endpoints: list[str]) -> dict[int, int]:
    """``current`` minus every cross-connect touching the given ports or lanes (a lane's
    circuit goes as a whole: both of its cross-connects)."""
    ports: set[int] = set()
    for text in endpoints:
        e = parse_endpoint(pm, text)
        if isinstance(e, int):
            ports.add(e)
        else:
            ports |= {e.ocs_tx, e.ocs_rx}
            # the other half of its circuit: the peer lane's TX feeding our RX, and our TX's peer RX
            peer_rx = current.get(e.ocs_tx)
            peer = pm.by_rx.get(peer_rx) if peer_rx else None
            if peer is not None:
                ports |= {peer.ocs_tx, peer.ocs_rx}
    return {i: o for i, o in current.items() if i not in ports and o not in ports}


def desired_state(pm: PortMap, path: str | Path, current: dict[int, int]) -> dict[int, int]:
    """What ``mfctl ocs apply FILE`` makes the OCS hold: FILE's state (:func:`load_topology_file`) — for
    a region's plan (``mfctl topo plan --json`` names its ``region``), on that region's ports only:
    the ``current`` cross-connects that touch none of them are kept, so applying one region's plan
    never deletes another region's circuits on a shared switch. Raises ConfigError (file, line) for a
    region this OCS does not hold, or a plan's cross-connect outside its region's ports."""
    desired, region, line = _topology(pm, path)
    if region is None:
        return desired
    if not isinstance(region, str) or region not in pm.region_ports:
        raise ConfigError(f"this plan is for region {region!r}, which OCS {pm.ocs or '(the only one)'} does not hold "
                          f"(its regions: {', '.join(sorted(pm.region_ports)) or 'none'})", path=str(path), line=line)
    mine = pm.region_ports[region]
    outside = sorted(p for i, o in desired.items() for p in (i, o) if p not in mine)
    if outside:
        raise ConfigError(f"this plan for region {region!r} uses port(s) {outside[:8]} outside the region's lanes",
                          path=str(path), line=line)
    return {i: o for i, o in current.items() if i not in mine and o not in mine} | desired


def load_topology_file(pm: PortMap, path: str | Path) -> dict[int, int]:
    """A desired OCS state: YAML/JSON with ``cross_connects: [[in, out], ...]`` and/or
    ``circuits: [[LANE_A, LANE_B], ...]``, or the saved output of ``mfctl ocs show --json`` or of
    ``mfctl topo plan -i INVENTORY --json`` (its cross-connects).
    Every port may be used once. An empty state must be written explicitly
    (``cross_connects: []``). Raises ConfigError with file and line."""
    return _topology(pm, path)[0]


def _topology(pm: PortMap, path: str | Path) -> tuple[dict[int, int], str | None, int]:
    """:func:`load_topology_file`'s state, with the ``region`` a saved topo plan names (None: not a
    region's plan) and the line of that name (the file read once)."""
    from mfctl.inventory.loader import load_yaml_with_lines

    src = str(path)
    data, lines = load_yaml_with_lines(path)
    region, region_line = None, 1
    if isinstance(data, dict) and data.get("schema") == "mfctl.topo.plan/v1":  # `mfctl topo plan -i INV --json`, saved
        region, region_line = data.get("region"), lines.get(("region",), 1)
        if "cross_connects" not in data:
            raise ConfigError("a topo plan made without an inventory has no cross-connects (mfctl topo plan TRAFFIC "
                              "-i INVENTORY --json)", path=src, line=1)
        if pm.inventory and data.get("inventory") != pm.inventory:  # its ports are another inventory's lanes
            raise ConfigError(f"this plan was made for inventory {data.get('inventory') or '(not recorded)'!r}, not "
                              f"{pm.inventory!r}: plan again with -i for this one", path=src, line=lines.get(("inventory",), 1))
        if pm.ocs and data.get("ocs") and data.get("ocs") != pm.ocs:  # the same port numbers on another switch
            raise ConfigError(f"this plan was made for region {data.get('region')!r} on OCS {data.get('ocs')!r}, not OCS "
                              f"{pm.ocs!r}: apply it with --ocs {data.get('ocs')}", path=src,
                              line=lines.get(("ocs",), 1))
        data = {"cross_connects": data["cross_connects"]}  # (its 'circuits' is the server circuit matrix)
    if isinstance(data, dict) and data.get("schema") == "mfctl.ocs.show/v1":  # `mfctl ocs show --json`, saved
        xcs = data.get("cross_connects")
        data = {"cross_connects": [[x.get("in"), x.get("out")] if isinstance(x, dict) else x for x in xcs]
                if isinstance(xcs, list) else xcs}
    if not isinstance(data, dict) or not set(data) <= {"cross_connects", "circuits", "description"} or not (
            "cross_connects" in data or "circuits" in data):
        raise ConfigError("expected a mapping with 'cross_connects' and/or 'circuits' (and optional 'description')",
                          path=src, line=1)
    for key in ("cross_connects", "circuits"):
        if key in data and not isinstance(data[key], list):
            raise ConfigError(f"'{key}' must be a list (write '{key}: []' for none)", path=src, line=lines.get((key,)))
    desired: dict[int, int] = {}
    owner: dict[int, str] = {}

    def put(i: int, o: int, what: str, line: int | None) -> None:
        for p, role in ((i, "input"), (o, "output")):
            try:
                pm.check_port(p, role)
            except UsageError as e:
                raise ConfigError(f"{what}: {e}", path=src, line=line) from None
            if p in owner:
                raise ConfigError(f"{what}: port {p} is already used by {owner[p]}", path=src, line=line)
        owner[i] = owner[o] = what
        desired[i] = o

    for k, pair in enumerate(data.get("cross_connects") or []):
        line = lines.get(("cross_connects", k))
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
            raise ConfigError("each cross-connect is [input, output] port numbers", path=src, line=line)
        put(pair[0], pair[1], f"cross-connect {pair[0]}->{pair[1]}", line)
    for k, pair in enumerate(data.get("circuits") or []):
        line = lines.get(("circuits", k))
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ConfigError("each circuit is [LANE_A, LANE_B]", path=src, line=line)
        try:
            xcs = cross_connects_for(pm, pair[0], pair[1])
        except UsageError as e:
            raise ConfigError(str(e), path=src, line=line) from None
        for i, o in xcs.items():
            put(i, o, f"circuit {pair[0]}<->{pair[1]}", line)
    return desired, region, region_line


def parse_alarm(line: str) -> dict:
    """A GR-833 alarm line ``aid:ntfcncde,condtype,srveff,ocrdat,ocrtm[,locn,dirn][:"descr"]`` as fields."""
    aid, _, rest = line.partition(":")
    body, _, descr = rest.partition(":")
    f = body.split(",") + [""] * 7
    # the description is quoted inside the quoted TL1 line (\"Loss of signal\"): whichever of the
    # quotes the caller stripped, none is left in it
    descr = descr.strip().replace('\\"', '"').strip().strip('"').rstrip("\\").strip()
    return {"aid": aid, "severity": f[0], "condition": f[1], "service": f[2], "date": f[3], "time": f[4],
            "location": f[5], "direction": f[6], "description": descr,
            "raw": line}


def power_report(pm: PortMap, readings: dict[int, float | None], xc: dict[int, int], margin_db: float,
                 inputs: int) -> list[dict]:
    """One row per port that belongs to a lane or carries a cross-connect: dBm, the lane,
    and a status. Outputs (ports > ``inputs``) that carry a cross-connect: ``ok``, ``low``
    (below the lane's sensitivity + margin) or ``dark`` (no light). Lane transmitters:
    ``ok`` or ``dark``. Anything else: ``idle``."""
    connected = set(xc) | set(xc.values())
    rows = []
    for p in sorted(set(pm.by_tx) | set(pm.by_rx) | connected):
        dbm = readings.get(p)
        status = "idle"
        if p > inputs and p in connected:
            thr = pm.rx_sensitivity.get(p, -10.0) + margin_db
            status = "dark" if dbm is None else ("low" if dbm < thr else "ok")
        elif p in pm.by_tx:
            status = "dark" if dbm is None else "ok"
        rows.append({"port": p, "lane": pm.name(p), "dbm": dbm, "status": status, "connected": p in connected})
    return rows


def journal_summary(r: dict) -> str:
    """A short human summary of one journal record."""
    op = r.get("op")
    if op == "ocs.intent":
        d = r.get("diff") or {}
        return f"{r.get('reason', '')}: -{len(d.get('delete', []))} +{len(d.get('add', []))}"
    if op == "ocs.command":
        aid = str(r.get("aid", ""))
        return (f"{r.get('verb')} {r.get('state')}{' ' + str(r.get('code')) if r.get('code') else ''} "
                f"({aid[:24]}{'…' if len(aid) > 24 else ''})")
    if op == "ocs.verify":
        return "read-back matches" if r.get("matches") else "read-back DIFFERS"
    if op == "ocs.outcome":
        return "ok" if r.get("ok") else f"FAILED: {str(r.get('error', ''))[:60]}"
    if op == "ocs.retry":
        d = r.get("diff") or {}
        return f"retry {r.get('attempt')}: -{len(d.get('delete', []))} +{len(d.get('add', []))}"
    if op == "ocs.recovered":
        return f"recovered ({r.get('mode')}{', automatic' if r.get('auto') else ''})"
    if op in ("corrupt", "torn"):
        return f"DAMAGED record ({r.get('why', op)}): {str(r.get('raw', ''))[:40]!r}"
    if op == "journal.sealed":
        return f"sealed a torn record of {r.get('bytes')} byte(s) at offset {r.get('offset')}"
    return ""


def one_way(pm: PortMap, xc: dict[int, int]) -> dict[int, int]:
    """The cross-connects of ``xc`` between the inventory's lanes that are not half of a duplex
    circuit: lane A's TX → lane B's RX without B's TX → A's RX. (A cross-connect on a port no
    lane of the inventory uses is someone else's, not ours to judge.)"""
    out = {}
    for i, o in xc.items():
        a, b = pm.by_tx.get(i), pm.by_rx.get(o)
        if a is not None and b is not None and xc.get(b.ocs_tx) != a.ocs_rx:
            out[i] = o
    return out


def journal_rows(records: list[dict], last: int) -> list[dict]:
    return [{"seq": r.get("seq"), "ts": r.get("ts"), "op": r.get("op"), "apply_id": r.get("apply_id"),
             "summary": journal_summary(r), "record": r} for r in records[-last:]]


def named_alarms(pm: PortMap, standing: list[str]) -> list[dict]:
    """Standing alarm lines (RTRV-ALM-ALL) as :func:`parse_alarm` fields plus the ``lane`` of a
    numeric AID (None for equipment AIDs such as ``SYSTEM``)."""
    def lane(aid: str):
        return pm.name(int(aid)) if aid.isascii() and aid.isdigit() else None

    return [parse_alarm(ln) | {"lane": lane(ln.split(":", 1)[0])} for ln in standing]


@dataclass
class JournalReport:
    """What ``mfctl ocs journal`` shows of a device journal: the last rows, the unfinished change
    (``pending``: :func:`mfctl.ocs.driver.pending_apply`, or None), the damaged records, and
    ``unknowable``: the records after the last readable change that leave its ending unknown
    (only when nothing is pending: :func:`mfctl.ocs.driver.journal_problems`)."""

    rows: list[dict]
    pending: dict | None
    damaged: list[dict]
    unknowable: list[dict]


def journal_report(records: list[dict], last: int) -> JournalReport:
    """The :class:`JournalReport` of ``records`` with their ``last`` rows."""
    from mfctl.ocs.driver import journal_problems, pending_apply

    pend = pending_apply(records)
    return JournalReport(rows=journal_rows(records, last), pending=pend,
                         damaged=[r for r in records if r.get("op") in ("corrupt", "torn")],
                         unknowable=journal_problems(records) if pend is None else [])


def legacy_journal_unfinished(inv, ocs: str | None = None) -> Path | None:
    """The journal an mfctl before device identities kept by inventory name
    (``<state>/ocs/<inventory>-<ocs>.journal.jsonl``) for the OCS named ``ocs`` (None: the only
    one), if it is left holding a change that did not finish — it is not read any more; the
    operator should check the switch."""
    from mfctl import settings
    from mfctl.ocs.driver import pending_apply
    from mfctl.ocs.journal import Journal

    name = inv.ocs.name if ocs is None else inv.ocs_named(ocs).name
    old = settings.state_path() / "ocs" / f"{inv.name}-{name}.journal.jsonl"
    return old if old.is_file() and pending_apply(Journal(old).records()) else None


def change_warnings(driver) -> list[str]:
    """What to warn of before a change on ``driver`` (opened with a purpose, so that its
    ``pending`` change and ``device_records`` are read): an unfinished earlier change that this
    one continues, or damaged/orphaned records that may hide one."""
    from mfctl.ocs.driver import journal_problems

    pend = driver.pending
    if pend:
        return [f"an earlier change ({pend['apply_id']}: {pend.get('reason')}) did not finish; this one "
                f"continues it (a later rollback returns to the state before {pend['apply_id']})"]
    bad = journal_problems(driver.device_records)
    if bad:
        return [f"the OCS journal has {len(bad)} damaged or orphaned record(s) after its last readable change "
                f"(see mfctl ocs journal): a change may be unfinished; this one starts from the switch's "
                f"confirmed state"]
    return []
