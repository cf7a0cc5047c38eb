"""The optics check: every optical lane with a circuit, end to end (link, Rx power against the
module's own thresholds, the module's total against the OCS's reading at the port the inventory
wires to the lane). A lane is a sub-port: its netdev is the one the host has at its PCI function
(devlink), and it is judged from the module channels it uses only (:meth:`NIC.subport_channels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mfctl.errors import ParseError
from mfctl.hosts import ethtool, iproute, mellanox
from mfctl.provision import breakout
from mfctl.provision.models import ProvisionSpec

if TYPE_CHECKING:
    from mfctl.observer import Observer

#: seconds a lane takes to come up after its OCS circuit changed (mean 5.67 s, p99 6.33 s: the
#: testbed's link-up measurement, the mock's model in :mod:`mfctl.mock.hosts`); a lane still down
#: this soon after a change of its ports is "not up yet", said with a hint to retry
LINKUP_S = 6.5
#: how far back a change counts as "recent" for that hint (a lane still down long after is down)
RECENT_S = 30.0


def recent_ocs_changes(drv, now: float | None = None) -> dict[int, float]:
    """``{OCS port: seconds since the last completed change that touched it}`` from the device's own
    journal (``ocs.intent`` diff → its ``ocs.outcome ok``), for changes that ended within
    :data:`RECENT_S`; {} when the journal cannot be read (no identity, no file). Read only."""
    import time

    from mfctl.ocs.identity import journal_path
    from mfctl.ocs.journal import Journal

    ident = getattr(drv, "identity", None)
    if ident is None:
        return {}
    try:
        recs = Journal(journal_path(ident)).records()
    except OSError:
        return {}
    now = time.time() if now is None else now
    ports_of: dict[str, set[int]] = {}
    out: dict[int, float] = {}
    for r in recs:
        if r.get("op") == "ocs.intent" and isinstance(r.get("diff"), dict):
            pairs = [p for k in ("add", "delete") for p in r["diff"].get(k) or []]
            ports_of[str(r.get("apply_id"))] = {int(x) for p in pairs for x in p}
        elif r.get("op") in ("ocs.outcome", "ocs.recovered") and isinstance(r.get("ts"), (int, float)):
            age = now - r["ts"]
            if 0 <= age <= RECENT_S:
                for port in ports_of.get(str(r.get("apply_id")), ()):
                    out[port] = min(age, out.get(port, age))
    return out


def check_optics(pool, inv, spec: ProvisionSpec, ocs_power: dict[int, float | None], xc: dict[int, int], *,
                 observer: Observer | None = None, changed: dict[int, float] | None = None) -> list[dict]:
    """Each optical lane end to end: link up, per-channel Rx power above the module's own
    low-warning threshold + margin, and the module's total Rx power agreeing with the OCS
    reading at the output port wired to this lane (a swapped fibre shows up here).
    ``ocs_power``: dBm by OCS output port; ``xc``: the OCS's cross-connects, input → output port;
    ``changed``: seconds since the last OCS change of each port (:func:`recent_ocs_changes`) — a lane
    down within :data:`LINKUP_S` of a change of its ports says so and to retry.
    One row per lane (every host's, in inventory order), ``status`` ok, bad or no circuit."""
    rx_ports = set(xc.values())
    changed = changed or {}

    def failed(h, finding: str) -> list[dict]:
        return [{"host": h.name, "lane": f"{nic.name}.{lane.index}", "netdev": lane.netdev, "ocs_rx": lane.ocs_rx,
                 "findings": [finding], "status": "bad"} for nic, lane in h.ocs_lanes()]

    def lane_rows(name: str) -> list[dict]:
        h = inv.host(name)
        r = pool.run(h.name, iproute.link_argv())
        if not r.ok:
            return failed(h, f"host unreachable: {r.error or r.stderr.strip()[:100]}")
        links = iproute.parse_links(r.stdout)
        d = pool.run(h.name, mellanox.devlink_ports_argv())
        ports = mellanox.parse_devlink_ports(d.stdout) if d.ok else {}
        parents: dict[str, str] = {}
        if not any(p.name.startswith("pci/") for p in ports.values()):  # Linux >= 6.5: ask ip for the parent devices
            r2 = pool.run(h.name, ["ip", "-d", "-j", "link", "show"])
            parents = breakout.parse_link_parents(r2.stdout) if r2.ok else {}
        return [_hint(_lane_row(pool, h.name, nic, lane, links, spec, ocs_power, rx_ports,
                                _netdev(ports, nic, lane, parents)), lane, changed)
                for nic, lane in h.ocs_lanes()]

    res = pool.map([h.name for h in inv.hosts], lane_rows, observer=observer, phase="optics")
    # a host whose link list did not parse (ParseError) gave no rows: its lanes are bad, saying why
    return [row for r in res for row in (r.value if r.value is not None else failed(inv.host(r.host), r.error))]


def _hint(row: dict, lane, changed: dict[int, float]) -> dict:
    """A lane found down soon after an OCS change of its ports: the finding says it may not be up yet."""
    ages = [changed[p] for p in (lane.ocs_tx, lane.ocs_rx) if p in changed]
    if "link down" in row["findings"] and ages and min(ages) < LINKUP_S:
        k = row["findings"].index("link down")
        row["findings"][k] = (f"link down {min(ages):.1f} s after an OCS change of its ports: link-up after a switch "
                              f"takes ~6 s (p99 6.3 s); retry")
        row["retry"] = True
    return row


def _netdev(ports: dict, nic, lane, parents: dict[str, str] | None = None) -> str:
    """The host's netdev for ``lane`` (its devlink port, or the link whose parent device is PCI
    function ``lane.index`` of the card: :func:`mfctl.provision.breakout.discover`), else the
    inventory's name."""
    hit = breakout.discover(ports, nic.pci, len(nic.lanes), parents).get(lane.index) if nic.pci else None
    return hit[1] if hit and hit[1] else lane.netdev


def _lane_row(pool, host: str, nic, lane, links: dict, spec: ProvisionSpec, ocs_power: dict[int, float | None],
              rx_ports: set[int], netdev: str | None = None) -> dict:
    nd = netdev or lane.netdev
    row = {"host": host, "lane": f"{nic.name}.{lane.index}", "netdev": nd, "ocs_rx": lane.ocs_rx, "findings": []}
    if nd != lane.netdev:
        row["inventory_netdev"] = lane.netdev
    if lane.ocs_rx not in rx_ports:
        row["status"] = "no circuit"
        return row
    link = links.get(nd)
    if link is None or not link.up:
        row["findings"].append("link down")
    m = pool.run(host, ethtool.module_argv(nd))
    if not m.ok:
        row["findings"].append(f"ethtool -m failed: {m.error or m.stderr.strip()[:100]}")
    else:
        try:
            _judge_module(row, ethtool.parse_module(m.stdout), spec, ocs_power.get(lane.ocs_rx), lane.ocs_rx,
                          nic.subport_channels(lane))
        except ParseError as e:
            row["findings"].append(str(e))
    row["status"] = "ok" if not row["findings"] else "bad"
    return row


def _judge_module(row: dict, mod, spec: ProvisionSpec, ocs: float | None, ocs_rx: int,
                  channels: list[int] | None = None) -> None:
    """A sub-port's Rx power (dBm per channel, only the module ``channels`` it uses — all of them
    when None; a 2x50G sub-port of a 4-channel SR4 module uses 2) against the module's low-warning
    threshold + margin, and their total against the OCS's reading ``ocs`` (dBm) at port ``ocs_rx``
    (the sub-port's own circuit): findings into ``row``."""
    import math

    rx = {c: v for c, v in mod.rx_power_dbm.items() if channels is None or int(c) in channels}
    row["rx_dbm"] = rx
    if channels is not None:
        row["channels"] = channels
    low = mod.rx_low_warning_dbm()
    if low is not None:
        bad = [c for c, v in rx.items() if v is None or v < low + spec.optics.rx_margin_db]
        if bad:
            row["findings"].append(f"Rx power below {low + spec.optics.rx_margin_db:.1f} dBm "
                                   f"(low warning {low} + margin) on channel(s) {bad}")
    vals = [v for v in rx.values() if v is not None]
    total = 10 * math.log10(sum(10 ** (v / 10) for v in vals)) if vals else None
    row["rx_total_dbm"] = None if total is None else round(total, 2)
    row["ocs_dbm"] = ocs
    if (ocs is None) != (total is None) or (ocs is not None and total is not None
                                            and abs(ocs - total) > spec.optics.ocs_agreement_db):
        row["findings"].append(f"module Rx {row['rx_total_dbm']} dBm but OCS port {ocs_rx} reads "
                               f"{ocs} dBm: the lane is not wired to the port the inventory says")
