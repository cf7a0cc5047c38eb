#!/usr/bin/env python3
"""Write a scaled-out mFabric inventory: SERVERS x 8 A100 in regions of PER_REGION servers,
their OCS lanes spread over OCSES optical switches (issue 22; docs/scale.md).

Each server is the prototype's (inventory/mfabric-prototype.yaml, paper App. C): 4 x ConnectX-6
Dx 100GbE, three to the OCS layer (alpha = 3) and one to the EPS. A region is one EP group: all
its lanes reach one OCS (a circuit joins two lanes of the same switch), so whole regions are
placed on OCSes, ``ceil(regions / OCSES)`` per switch, in order; each OCS is sized to what it
holds (inputs = outputs = its lanes, Polatis numbering: inputs 1..N, outputs N+1..2N).

Usage::

    python inventory/gen_scale.py --servers 128 --per-region 8 --ocses 4 -o inventory/mfabric-1024.yaml
    python inventory/gen_scale.py --servers 32 --per-region 8 --ocses 2 -o inventory/mfabric-256.yaml

Addresses are from the documentation ranges (RFC 5737 192.0.2.11-199 for the first 189 hosts and
192.0.2.200-254 for the OCSes, 198.51.100.0/24 and 203.0.113.0/24 after, then 2001:db8::/32, RFC
3849); the mock (``mfctl mock up``) rewrites them to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import math
import sys

import yaml

GPUS, LANES = 8, 3  # per server: A100s, OCS-facing NICs (alpha)
NIC_PCI = ("0000:0c:00.0", "0000:12:00.0", "0000:8a:00.0", "0000:90:00.0")
NETS = ("192.0.2", "198.51.100", "203.0.113")  # RFC 5737 documentation ranges


def address(i: int) -> str:
    """The ``i``-th host's management address (0-based): 192.0.2.11-199 (200-254 are the OCSes'),
    then 254 each of the other documentation ranges, then the IPv6 documentation prefix."""
    if i < 189:
        return f"{NETS[0]}.{i + 11}"
    net, host = divmod(i - 189, 254)
    if net + 1 >= len(NETS):  # the IPv6 documentation prefix (RFC 3849) for the rest
        return f"2001:db8::{i + 1:x}"
    return f"{NETS[net + 1]}.{host + 1}"


def ocs_address(index: int) -> str:
    """The ``index``-th OCS's management address: 192.0.2.200-254, then 2001:db8:0:1::/64."""
    return f"{NETS[0]}.{200 + index}" if index < 55 else f"2001:db8:0:1::{index + 1:x}"


def host_doc(name: str, i: int, lane_ports: list[tuple[int, int]]) -> dict:
    nics = []
    for k in range(4):
        ocs = k < LANES
        lane = {"index": 0, "netdev": f"ens{k + 1}f0np0"}
        if ocs:
            lane.update(ocs_tx=lane_ports[k][0], ocs_rx=lane_ports[k][1])
        nics.append({"name": f"nic{k}", "model": "ConnectX-6 Dx", "pci": NIC_PCI[k], "speed_gbps": 100,
                     "breakout": "1x100G", "numa_node": 0 if k < 2 else 1, "role": "ocs" if ocs else "eps",
                     "lanes": [lane]})
    return {"name": name, "ssh": {"address": address(i), "port": 22, "user": "mfabric", "agent": True},
            "gpus": {"count": GPUS, "model": "NVIDIA A100-SXM4-80GB", "nvlink_gbps": 1840}, "nics": nics}


def ocs_doc(name: str, index: int, ports: int) -> dict:
    return {"name": name, "model": "Polatis Series 7000", "size": {"inputs": ports, "outputs": ports},
            "transports": [{"kind": "tcp", "address": ocs_address(index), "port": 3082},
                           {"kind": "ssh", "address": ocs_address(index), "port": 6252}],
            "user": "admin", "password_env": "MFCTL_OCS_PASSWORD", "insertion_loss_db": 1.0, "switching_time_ms": 25}


def inventory(servers: int, per_region: int, ocses: int, name: str) -> dict:
    """The inventory document. Raises ValueError when the numbers do not fit."""
    if servers % per_region:
        raise ValueError(f"{servers} servers do not make whole regions of {per_region}")
    regions = servers // per_region
    if not 1 <= ocses <= regions:
        raise ValueError(f"--ocses must be 1..{regions} (a region's lanes all reach one OCS)")
    per_ocs = math.ceil(regions / ocses)
    ports = per_ocs * per_region * LANES
    if ports > 1024:
        raise ValueError(f"{per_ocs} regions of {per_region} servers x {LANES} lanes = {ports} ports on one OCS: "
                         "over 1,024 a side; use more OCSes")
    width = max(2, len(str(servers)))
    hosts, region_docs, used = [], [], {}
    for r in range(regions):
        o = r // per_ocs
        names = []
        for j in range(per_region):
            i = r * per_region + j
            hn = f"gpu{i + 1:0{width}d}"
            base = used.get(o, 0)
            lane_ports = [(base + k + 1, ports + base + k + 1) for k in range(LANES)]
            used[o] = base + LANES
            hosts.append(host_doc(hn, i, lane_ports))
            names.append(hn)
        region_docs.append({"name": f"region{r}", "hosts": names, **({"ocs": f"ocs{o + 1}"} if ocses > 1 else {})})
    ocs_list = [ocs_doc(f"ocs{o + 1}", o, ports) for o in range(ocses)]
    return {"name": name,
            "description": f"mFabric at scale: {servers} x {GPUS} A100 = {servers * GPUS} GPUs, {regions} regions of "
                           f"{per_region} servers, {ocses} OCS{'es' if ocses > 1 else ''} of {ports}x{ports} "
                           f"(written by inventory/gen_scale.py)",
            "ssh": {"known_hosts": "~/.ssh/known_hosts", "host_key_policy": "strict"},
            "hosts": hosts, "ocs": ocs_list[0] if ocses == 1 else ocs_list,
            "eps": {"name": "eps1", "model": "NVIDIA Spectrum SN3700", "ports": 32, "port_speed_gbps": 200},
            "regions": region_docs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])

    def positive(v: str) -> int:
        if not v.isdigit() or int(v) < 1:
            raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {v!r}")
        return int(v)

    ap.add_argument("--servers", type=positive, default=128)
    ap.add_argument("--per-region", type=positive, default=8, help="servers per region (one EP group)")
    ap.add_argument("--ocses", type=positive, default=4, help="optical switches (whole regions per switch)")
    ap.add_argument("--name", default=None, help="the inventory's name (default mfabric-<GPUs>)")
    ap.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    a = ap.parse_args(argv)
    try:
        doc = inventory(a.servers, a.per_region, a.ocses, a.name or f"mfabric-{a.servers * GPUS}")
    except ValueError as e:
        ap.error(str(e))
    text = (f"# {doc['description']}\n# regenerate: python inventory/gen_scale.py --servers {a.servers} "
            f"--per-region {a.per_region} --ocses {a.ocses} -o {a.output}\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=140))
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
