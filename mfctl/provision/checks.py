"""End-to-end checks after apply (``mfctl provision check``, ``apply --check``): per OCS circuit
and per EPS path between the selected hosts —

1. ``show_gids`` on both ends: a RoCE v2 GID on each lane's address (its index is what perftest
   and ``NCCL_IB_GID_INDEX`` use);
2. ``ib_write_bw`` (perftest): the server on the far lane, the client on the near one, marked
   with the RoCE traffic class; the client's ``BW average[Gb/sec]`` against the lane rate ×
   :data:`PERFTEST_EFFICIENCY`;
3. ``ethtool -S`` on the far lane before and after: ``rx_prio<P>_bytes`` of the RoCE priority P
   moved by at least half of what the test sent (the traffic was classified on P, the lossless
   one); ``rx_prio<P>_pause`` is reported as it is (pause frames appear only under congestion).

Rows: ``{"path", "src", "dst", "check", "expected", "measured", "status" (ok, bad, skipped), "why"}``.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode, ParseError
from mfctl.hosts import ethtool, rdma

if TYPE_CHECKING:
    from mfctl.observer import Observer

#: ib_write_bw's average over a 100GbE RoCE lane is 92-98 Gb/s in operators' reports (ConnectX-5/6,
#: MTU 4096, 64 KiB-1 MiB messages: 92.62, 97.29, 98.02 Gb/s — docs/provisioning.md §Safe rollout):
#: below 90 % of the lane rate is a finding
PERFTEST_EFFICIENCY = 0.90
#: seconds ib_write_bw runs (``-D``), and its TCP port for the exchange (perftest's default 18515)
PERFTEST_SECONDS = 2
PERFTEST_PORT = 18515
#: wall seconds the client retries while the server is not listening yet
CONNECT_RETRY_S = 5.0
_BW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?\s*$")


def roce_tclass(prio: int) -> int:
    """The traffic class (DSCP << 2) RoCE traffic of priority ``prio`` carries under DSCP trust with
    the default DSCP→priority map (priority = DSCP >> 3): DSCP 8·prio + 2 (26, AF31, for 3)."""
    return (8 * prio + 2) << 2


def perftest_argv(dev: str, gid_index: int, port: int, server_ip: str | None = None, tclass: int | None = None) -> list[str]:
    """``ib_write_bw -d DEV -x GID -F --report_gbits -D S -p PORT [--tclass=T] [SERVER]`` (no SERVER: the server side)."""
    argv = ["ib_write_bw", "-d", dev, "-x", str(gid_index), "-F", "--report_gbits", "-D", str(PERFTEST_SECONDS),
            "-p", str(port)]
    if tclass is not None:
        argv.append(f"--tclass={tclass}")
    return argv + ([server_ip] if server_ip else [])


def parse_perftest(text: str) -> float:
    """``BW average[Gb/sec]`` of ib_write_bw's result line (the row under the ``#bytes`` header). Raises ParseError."""
    lines = text.splitlines()
    for no, ln in enumerate(lines, 1):
        if "BW average[Gb/sec]" in ln:
            for k, row in enumerate(lines[no:], no + 1):
                m = _BW.match(row)
                if m:
                    return float(m.group(4))
                if row.strip() and not row.strip().startswith("-") and not row.startswith("Conflicting"):
                    raise ParseError("ib_write_bw", k, "'#bytes #iterations peak average [MsgRate]'", row.strip())
    raise ParseError("ib_write_bw", None, "a 'BW average[Gb/sec]' table (--report_gbits)", text.strip()[-200:])


def paths(inv, spec, xc: dict[int, int], names: list[str], *,
          by_ocs: dict[str, tuple[list[str], dict[int, int]]] | None = None) -> list[dict]:
    """The paths to check among hosts ``names``: every OCS circuit (lane → lane the cross-connect
    joins, once per duplex pair) and one EPS path per consecutive pair of hosts (their first EPS
    lanes, through the switch). Each: ``{"path", "src": (host, nic, lane, address), "dst": …}``.

    ``by_ocs`` (several OCSes): each OCS's name → (its hosts among ``names``, its cross-connects);
    port numbers repeat from one switch to the next, so each switch's circuits are looked for
    among its own hosts' lanes only, and such a path is ``OCS NAME TX→RX`` with ``"ocs": NAME``
    (``xc`` is then unused). Without it, ``xc`` is the only OCS's, over every host of ``names``."""
    index = {h.name: i for i, h in enumerate(inv.hosts)}
    ends = []
    for name in names:
        h = inv.host(name)
        for ni, nic in enumerate(h.nics):
            for lane in nic.lanes:
                addr = spec.address_for(index[name] + 1, ni, lane.index)
                ends.append((h.name, nic, lane, addr.split("/")[0] if addr else None))
    out: list[dict] = []
    if by_ocs is None:
        out += _circuit_paths(ends, xc, None)
    else:
        for ocs, (mine, oxc) in by_ocs.items():
            on = set(mine)
            out += _circuit_paths([e for e in ends if e[0] in on], oxc, ocs)
    firsts = [next((e for e in ends if e[0] == n and e[1].role == "eps"), None) for n in names]
    eps = [e for e in firsts if e is not None]
    for a, b in zip(eps, eps[1:]):
        out.append({"path": "EPS", "src": a, "dst": b})
    return out


def _circuit_paths(ends: list, xc: dict[int, int], ocs: str | None) -> list[dict]:
    """One path per duplex circuit of ``xc`` among the lanes ``ends`` (of one OCS, named ``ocs``
    when there are several)."""
    by_rx = {e[2].ocs_rx: e for e in ends if e[1].role == "ocs" and e[2].ocs_rx}
    out: list[dict] = []
    seen: set[frozenset] = set()
    for e in ends:
        if e[1].role != "ocs" or e[2].ocs_tx is None or e[2].ocs_tx not in xc:
            continue
        far = by_rx.get(xc[e[2].ocs_tx])
        if far is None or far[0] == e[0]:
            continue
        key = frozenset([(e[0], e[2].netdev), (far[0], far[2].netdev)])
        if key in seen:
            continue
        seen.add(key)
        label = f"OCS {e[2].ocs_tx}→{xc[e[2].ocs_tx]}" if ocs is None else f"OCS {ocs} {e[2].ocs_tx}→{xc[e[2].ocs_tx]}"
        out.append({"path": label, "src": e, "dst": far} | ({"ocs": ocs} if ocs is not None else {}))
    return out


def check_paths(pool, inv, spec, xc: dict[int, int], names: list[str], *, observer: Observer | None = None,
                by_ocs: dict[str, tuple[list[str], dict[int, int]]] | None = None) -> list[dict]:
    """Every path of :func:`paths` (``by_ocs``: several OCSes, as there), one after the other (two
    tests at once would share a lane): the GID check of both ends, then (when both have one)
    ib_write_bw and the PFC counters."""
    ps = paths(inv, spec, xc, names, by_ocs=by_ocs)
    if observer is not None:
        observer.phase("check", "paths", total=len(ps))
    gids: dict[str, list[rdma.Gid] | str] = {}
    rows: list[dict] = []
    prio = spec.roce.pfc_priority if spec.roce.pfc_priority is not None else 0
    for k, p in enumerate(ps):
        rows += _check_path(pool, p, gids, prio, PERFTEST_PORT + k)
    return rows


def _label(e) -> str:
    return f"{e[0]}/{e[1].name}.{e[2].index} ({e[2].netdev})"


def _gid(pool, e, gids: dict) -> tuple[rdma.Gid | None, str | None]:
    host, _, lane, ip = e
    if host not in gids:
        r = pool.run(host, ["show_gids"])
        try:
            gids[host] = rdma.parse_show_gids(r.stdout) if r.ok else f"show_gids: {r.error or r.stderr.strip()[:200]}"
        except ParseError as x:
            gids[host] = str(x)
    got = gids[host]
    if isinstance(got, str):
        return None, f"{host}: {got}"
    if ip is None:
        return None, "the recipe gives the lane no address (address_pattern)"
    g = next((g for g in got if g.netdev == lane.netdev and g.version == "v2" and g.ipv4 == ip), None)
    if g is None:
        have = sorted({f"{x.ipv4} {x.version}" for x in got if x.netdev == lane.netdev and x.ipv4})
        return None, f"no RoCE v2 GID for {ip} on {lane.netdev} (it has {', '.join(have) or 'no IPv4 GID'})"
    return g, None


def _rx_prio(pool, e, prio: int) -> tuple[int, int] | str:
    r = pool.run(e[0], ethtool.stats_argv(e[2].netdev))
    if not r.ok:
        return f"ethtool -S {e[2].netdev}: {r.error or r.stderr.strip()[:200]}"
    try:
        s = ethtool.parse_stats(r.stdout)
    except ParseError as x:
        return str(x)
    return s.prio("rx", prio), s.prio("rx", prio, "pause")


def _check_path(pool, p: dict, gids: dict, prio: int, port: int) -> list[dict]:
    src, dst = p["src"], p["dst"]
    base = {"path": p["path"], "src": _label(src), "dst": _label(dst)} | ({"ocs": p["ocs"]} if "ocs" in p else {})
    rows, found = [], {}
    for end, e in (("src", src), ("dst", dst)):
        g, why = _gid(pool, e, gids)
        found[end] = g
        rows.append(base | {"check": f"RoCE v2 GID ({end})", "expected": e[3] or "an address",
                            "measured": f"{g.device} index {g.index}" if g else None,
                            "status": "ok" if g else "bad", "why": why})
    rate = min(src[1].lane_rate_gbps, dst[1].lane_rate_gbps)
    want = round(rate * PERFTEST_EFFICIENCY, 2)
    if not (found["src"] and found["dst"]):
        rows.append(base | {"check": "ib_write_bw", "expected": f">= {want} Gb/s", "measured": None, "status": "skipped",
                            "why": "no RoCE v2 GID on both ends"})
        return rows
    before = _rx_prio(pool, dst, prio)
    bw, why = _perftest(pool, src, dst, found["src"], found["dst"], port, roce_tclass(prio))
    rows.append(base | {"check": "ib_write_bw", "expected": f">= {want} Gb/s", "measured": None if bw is None else bw,
                        "status": "ok" if bw is not None and bw >= want else "bad",
                        "why": why or (None if bw is None or bw >= want else
                                       f"{bw} Gb/s is below {PERFTEST_EFFICIENCY:.0%} of the {rate:g} Gb/s lane")})
    after = _rx_prio(pool, dst, prio)
    sent = (bw or 0.0) * 1e9 / 8 * PERFTEST_SECONDS
    if isinstance(before, str) or isinstance(after, str):
        rows.append(base | {"check": f"rx_prio{prio}_bytes", "expected": "moving", "measured": None, "status": "bad",
                            "why": before if isinstance(before, str) else after})
    elif bw is None:
        rows.append(base | {"check": f"rx_prio{prio}_bytes", "expected": "moving", "measured": None, "status": "skipped",
                            "why": "no traffic was sent"})
    else:
        moved = after[0] - before[0]
        rows.append(base | {"check": f"rx_prio{prio}_bytes", "expected": f">= {int(sent / 2)} B",
                            "measured": f"{moved} B, {after[1] - before[1]} pause frames",
                            "status": "ok" if moved >= sent / 2 else "bad",
                            "why": None if moved >= sent / 2 else
                            f"the RoCE traffic did not arrive on priority {prio} (DSCP trust and the DSCP→priority map?)"})
    return rows


def _perftest(pool, src, dst, gs: rdma.Gid, gd: rdma.Gid, port: int, tclass: int) -> tuple[float | None, str | None]:
    """Server on ``dst`` (in a thread), then the client on ``src``; the client's average Gb/s, or why not."""
    timeout = PERFTEST_SECONDS + CONNECT_RETRY_S + 30
    server: dict = {}

    def serve():
        server["r"] = pool.run(dst[0], perftest_argv(gd.device, gd.index, port, tclass=tclass), timeout=timeout)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    deadline = time.monotonic() + CONNECT_RETRY_S
    while True:
        c = pool.run(src[0], perftest_argv(gs.device, gs.index, port, dst[3], tclass), timeout=timeout)
        if c.ok or "Couldn't connect" not in (c.stdout + c.stderr) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    t.join(timeout if c.ok else 2.0)  # a server whose client failed ends at its own timeout
    if not c.ok:
        return None, f"{src[0]}: ib_write_bw to {dst[3]}: " + (c.error or f"exit {c.rc}: {(c.stderr or c.stdout).strip()[-300:]}")
    try:
        return parse_perftest(c.stdout), None
    except ParseError as x:
        return None, f"{src[0]}: {x}"


def exit_code(rows: list[dict]) -> ExitCode:
    """FAILED (1) on a bad row, DRIFT (6) when nothing was checked (no path, or every row skipped), else OK."""
    if any(r["status"] == "bad" for r in rows):
        return ExitCode.FAILED
    return ExitCode.OK if any(r["status"] == "ok" for r in rows) else ExitCode.DRIFT
