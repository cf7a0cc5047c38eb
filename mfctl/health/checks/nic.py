"""NIC checks: lane links (``links``: ``ip -j link``), lane speed (``speed``: ``ethtool IF``), error
counters over a window of sweeps (``counters``: ``ethtool -S``) and RoCE priority (``roce``: the
same ``ethtool -S``, run once for both).

Sources: mlx5 counter names and meanings (mfctl/hosts/ethtool.py, NVIDIA MLNX_OFED docs); the
expected lane speed is the inventory's ``lane_rate_gbps``; the lossless RoCE priority is the
``roce_priority`` threshold (802.1p, default 3 as playbooks/provision.yaml sets PFC).
"""

from __future__ import annotations

from mfctl.errors import ParseError
from mfctl.health import history
from mfctl.health.checks.base import Check, Probe
from mfctl.hosts import ethtool, iproute


def lanes(p: Probe) -> dict[str, tuple]:
    """Every lane of the host by netdev: ``(nic, lane)``."""
    return {lane.netdev: (nic, lane) for nic in p.host.nics for lane in nic.lanes}


# --- links -----------------------------------------------------------------------------------

def _parsed_links(p: Probe, r) -> dict | None:
    if not r.ok:
        p.add("critical", r.error or f"ip exited {r.rc}: {r.stderr.strip()[:200]}", "nic.query_failed", value=r.rc)
        return None
    try:
        return iproute.parse_links(r.stdout)
    except ParseError as e:
        p.add("critical", str(e), "nic.unparsable")
        return {}


def judge_links(p: Probe, results: dict) -> None:
    links = _parsed_links(p, results["links"])
    if links is None:
        return
    hh = p.health
    for netdev, (nic, lane) in lanes(p).items():
        link = links.get(netdev)
        if link is None:
            if links:
                p.add("critical", f"{nic.name} lane {lane.index}: netdev {netdev} not present", "nic.netdev_missing",
                      component=netdev)
            continue
        (hh.links_up if link.up else hh.links_down).append(netdev)
        if nic.role == "eps" and not link.up:
            p.add("critical", f"EPS link {netdev} ({nic.name}) is {link.operstate}", "nic.eps_link_down",
                  component=netdev, value=link.operstate)
    p.facts["links_up"] = set(hh.links_up)


LINKS = Check("links", "nic", "ip -j link", "every inventory lane's netdev present; EPS links up (lanes up and down: "
              "links_up/links_down)", lambda p: {"links": iproute.link_argv()}, None, judge_links)


# --- speed -----------------------------------------------------------------------------------

def judge_speed(p: Probe, data: dict) -> None:
    by = lanes(p)
    for netdev, ls in data.items():
        want = int(by[netdev][0].lane_rate_gbps * 1000)
        if ls.link_detected and ls.speed_mbps and ls.speed_mbps != want:
            p.add("warning", f"{netdev} runs at {ls.speed_mbps} Mb/s, expected {want}", "nic.speed", component=netdev,
                  value=ls.speed_mbps, limit=want, unit="Mb/s")


SPEED = Check("speed", "nic", "ethtool IF (every lane)", "the negotiated speed against the inventory's lane rate",
              lambda p: {nd: ethtool.link_argv(nd) for nd in lanes(p)}, ethtool.parse_link, judge_speed)


# --- counters --------------------------------------------------------------------------------

def _stats_argv(p: Probe) -> dict[str, list[str]]:
    """One ``ethtool -S`` per NIC, on its first lane (the counters are the port's)."""
    return {nic.name: ethtool.stats_argv(nic.lanes[0].netdev) for nic in p.host.nics if nic.lanes}


#: (counters, threshold, what they mean, code)
_ERRORS = ((ethtool.PHY_ERRORS, "nic_phy_errors_max", "physical-layer errors (a dirty connector, a failing transceiver "
            "or fibre?)", "nic.phy_errors"),
           (ethtool.DROPS, "nic_drops_max", "drops for lack of buffers (PFC/buffers?)", "nic.drops"))


def judge_counters(p: Probe, data: dict) -> None:
    """What each NIC's error counters gained over ``nic_error_window_s`` of earlier sweeps
    (:mod:`mfctl.health.history`); this sweep's reading is kept in ``nic_counters``."""
    for nic, st in data.items():
        hist = history.history_of(p.baseline, p.name, nic)
        cur = history.reading(st, hist, p.now)
        ref = None if p.since_boot else history.reference(hist, p.now, p.lim["nic_error_window_s"])
        first = None if p.since_boot or not hist else hist[0]
        for names, limit, what, code in _ERRORS:
            bad, since, grown = history.new_errors(cur, names, ref, first)
            if sum(bad.values()) > p.lim[limit]:
                p.add("warning", f"{nic}: {what} {since}: " + ", ".join(f"{k}={'+' if grown else ''}{v}" for k, v in bad.items()),
                      code, component=nic, value=bad, limit=p.lim[limit])
        p.health.nic_counters[nic] = cur


COUNTERS = Check("counters", "nic", "ethtool -S (first lane of each NIC)",
                 "physical-layer errors and buffer drops gained over nic_error_window_s of earlier sweeps",
                 _stats_argv, ethtool.parse_stats, judge_counters)


# --- roce ------------------------------------------------------------------------------------

def judge_roce(p: Probe, data: dict) -> None:
    roce, share = int(p.lim["roce_priority"]), p.lim["wrong_priority_share"]
    for nic, st in data.items():
        pb = st.prio_bytes()
        total = sum(pb.values())
        wrong = total - pb.get(roce, 0)
        if total and wrong / total > share:
            top = max(pb, key=pb.get)
            p.add("warning", f"{nic}: {100 * wrong / total:.0f}% of traffic on priorities other than {roce} (most on prio "
                             f"{top}): PFC/DSCP not applied?", "roce.wrong_priority", component=nic,
                  value=round(wrong / total, 4), limit=share)


ROCE = Check("roce", "roce", "ethtool -S (the same reading as counters)",
             "bytes outside the lossless priority roce_priority, as a share of all (wrong_priority_share)",
             _stats_argv, ethtool.parse_stats, judge_roce)
