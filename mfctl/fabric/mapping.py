"""Map planned circuits onto physical lanes and OCS ports, and build the route table.

A duplex circuit between lane ``a`` (server i) and lane ``b`` (server j) is two one-way
cross-connects: ``a.ocs_tx → b.ocs_rx`` and ``b.ocs_tx → a.ocs_rx`` (DESIGN §2).

The mapping is *stable*: a circuit that already exists between two servers keeps its
lanes when the new plan still wants a circuit there, because re-patching an unchanged
circuit flaps its link for seconds (DESIGN §5). New circuits take free lanes, spreading
parallel circuits between the same pair over different NUMA nodes (paper's permuteLinks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LaneRef:
    """One optical lane: host, NIC, lane index, netdev, OCS TX (input) and RX (output) ports."""

    host: str
    nic: str
    lane: int
    netdev: str
    numa: int
    ocs_tx: int
    ocs_rx: int

    @property
    def key(self) -> str:
        return f"{self.host}/{self.nic}.{self.lane}"


@dataclass(frozen=True)
class Circuit:
    a: LaneRef
    b: LaneRef

    def cross_connects(self) -> list[tuple[int, int]]:
        return [(self.a.ocs_tx, self.b.ocs_rx), (self.b.ocs_tx, self.a.ocs_rx)]

    def to_dict(self) -> dict:
        return {"a": self.a.key, "b": self.b.key, "a_netdev": self.a.netdev, "b_netdev": self.b.netdev,
                "cross_connects": [list(x) for x in self.cross_connects()]}


def region_lanes(inv, hosts: list[str]) -> dict[str, list[LaneRef]]:
    """Optical lanes of each host in a region, in inventory order."""
    out: dict[str, list[LaneRef]] = {}
    for hn in hosts:
        h = inv.host(hn)
        out[hn] = [LaneRef(hn, nic.name, lane.index, lane.netdev, nic.numa_node, lane.ocs_tx, lane.ocs_rx)
                   for nic, lane in h.ocs_lanes()]
    return out


def circuits_from_cross_connects(lanes: dict[str, list[LaneRef]], xc: dict[int, int]) -> list[Circuit]:
    """Recover duplex circuits from a cross-connect map (one-way halves are ignored)."""
    by_tx = {lane.ocs_tx: lane for ls in lanes.values() for lane in ls}
    by_rx = {lane.ocs_rx: lane for ls in lanes.values() for lane in ls}
    out, seen = [], set()
    for i, o in sorted(xc.items()):
        a, b = by_tx.get(i), by_rx.get(o)
        if a is None or b is None or a.key in seen or b.key in seen:
            continue
        if xc.get(b.ocs_tx) == a.ocs_rx and a.host != b.host:
            out.append(Circuit(a, b))
            seen |= {a.key, b.key}
    return out


def map_circuits(C: np.ndarray, hosts: list[str], lanes: dict[str, list[LaneRef]],
                 previous: Sequence[Circuit] = ()) -> list[Circuit]:
    """Assign lanes to the circuits of ``C`` (``[n, n]`` over ``hosts``), keeping ``previous``
    circuits that the plan still wants. Raises ValueError if a host lacks lanes."""
    n = len(hosts)
    idx = {h: k for k, h in enumerate(hosts)}
    want = np.array(C, dtype=int).copy()
    used: set[str] = set()
    out: list[Circuit] = []
    for c in previous:
        i, j = idx.get(c.a.host), idx.get(c.b.host)
        if i is None or j is None or want[i, j] <= 0:
            continue
        want[i, j] -= 1
        want[j, i] -= 1
        used |= {c.a.key, c.b.key}
        out.append(c)

    def pick(host: str, avoid_numa: set[int]) -> LaneRef:
        free = [lane for lane in lanes[host] if lane.key not in used]
        if not free:
            raise ValueError(f"host {host} has no free optical lane for another circuit")
        free.sort(key=lambda lane: (lane.numa in avoid_numa, ))
        return free[0]

    for i in range(n):
        for j in range(i + 1, n):
            for _ in range(int(want[i, j])):
                hi, hj = hosts[i], hosts[j]
                existing = [c for c in out if {c.a.host, c.b.host} == {hi, hj}]
                numa_i = {c.a.numa if c.a.host == hi else c.b.numa for c in existing}
                numa_j = {c.a.numa if c.a.host == hj else c.b.numa for c in existing}
                a, b = pick(hi, numa_i), pick(hj, numa_j)
                used |= {a.key, b.key}
                out.append(Circuit(a, b))
    return out


def cross_connect_map(circuits: list[Circuit]) -> dict[int, int]:
    return {i: o for c in circuits for i, o in c.cross_connects()}


def circuit_matrix(circuits: list[Circuit], hosts: list[str]) -> np.ndarray:
    idx = {h: k for k, h in enumerate(hosts)}
    C = np.zeros((len(hosts), len(hosts)), dtype=int)
    for c in circuits:
        i, j = idx[c.a.host], idx[c.b.host]
        C[i, j] += 1
        C[j, i] += 1
    return C


def route_table(circuits: list[Circuit], hosts: list[str]) -> dict:
    """Per ordered server pair: the circuit lanes to use, or ``eps``. JSON-serialisable."""
    routes: dict[str, dict] = {}
    for a in hosts:
        for b in hosts:
            if a == b:
                continue
            lanes = [(c.a.netdev, c.b.netdev) if c.a.host == a else (c.b.netdev, c.a.netdev)
                     for c in circuits if {c.a.host, c.b.host} == {a, b}]
            routes[f"{a}->{b}"] = {"via": "ocs", "lanes": [list(x) for x in lanes]} if lanes else {"via": "eps"}
    return routes
