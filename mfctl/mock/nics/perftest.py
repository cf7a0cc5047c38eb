"""perftest's ``ib_write_bw`` on the mock host: a server (no address) waits for one client; the
client (``… SERVER_IP``) finds the mock host whose netdev has that address and the server
listening on the port, and both print perftest's report (``--report_gbits``: the header, the
local/remote GIDs as perftest prints them — decimal bytes, IPv4-mapped —, then ``#bytes
#iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]``).

The bandwidth is modelled: the slower lane's rate × the RoCE payload share of a packet at the
RoCE MTU the netdev MTU allows (4096 at MTU 9000, 1024 at 1500; 78 B of Ethernet, IP, UDP, BTH,
RETH, ICRC, preamble and gap per packet) × 0.96 (the rest of the protocol) — 94 Gb/s on a 100G
lane at MTU 9000, 89 Gb/s at 1500. Reachable only when the two lanes are joined: both up and the
OCS circuit joins the client's transmitter to the server's receiver, or both on the EPS. Else the
RC QP's retries are exhausted: ``Completion with error`` / ``Failed status 12`` (IBV_WC_RETRY_EXC_ERR)
and exit 1, as perftest reports it. The bytes land on the receiver's priority that its trust mode
gives the packets (DSCP trust: the traffic class's DSCP through the DSCP→priority map; PCP trust:
untagged RoCE is priority 0), counted for ``ethtool -S``'s ``rx_prio<P>_bytes``
(:func:`prio_bytes`).
"""

from __future__ import annotations

import threading
import time

#: RoCE MTUs (IB MTU enumeration) and the per-packet overhead on the wire, bytes
ROCE_MTUS = (4096, 2048, 1024, 512, 256)
WIRE_OVERHEAD_B = 78
PROTOCOL_EFFICIENCY = 0.96
SERVER_WAIT_S = 20.0  # wall seconds a server waits for its client (real perftest waits for ever)
MSG_BYTES = 65536


def _registry(tb) -> dict:
    """The testbed's one registry of listening servers and bytes moved. A host of a second OCS's
    region sees the testbed through a view (mfctl.mock.testbed._HostView, its own ``ocs``): the
    registry is the testbed's, not the view's — else its servers are found by no other host."""
    tb = getattr(tb, "_testbed", tb)
    reg = tb.__dict__.get("_perftest")
    if reg is None:
        reg = tb.__dict__.setdefault("_perftest", {"lock": threading.Lock(), "servers": {}, "bytes": {}})
    return reg


def prio_bytes(cfg, netdev: str) -> dict[tuple[str, int], int]:
    """Bytes ib_write_bw moved on ``netdev`` of this host: ``(rx|tx, priority) → bytes``."""
    reg = _registry(cfg.host.testbed)
    with reg["lock"]:
        return {k[2:]: v for k, v in reg["bytes"].items() if k[:2] == (cfg.host.name, netdev)}


def roce_mtu(netdev_mtu: int) -> int:
    """The largest RoCE MTU that fits the netdev MTU with the RoCE headers (mlx5: active_mtu)."""
    return next((m for m in ROCE_MTUS if m + 82 <= netdev_mtu), 256)


def _opts(args):
    o = {"dev": None, "gid": None, "secs": 5.0, "port": 18515, "tclass": 0, "server": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-d", "-x", "-D", "-p") and i + 1 < len(args):
            o[{"-d": "dev", "-x": "gid", "-D": "secs", "-p": "port"}[a]] = args[i + 1]
            i += 2
            continue
        if a.startswith("--tclass="):
            o["tclass"] = int(a.split("=", 1)[1])
        elif not a.startswith("-"):
            o["server"] = a
        i += 1
    o["secs"], o["port"] = float(o["secs"]), int(o["port"])
    return o


def _gid_bytes(ip: str) -> str:
    return "00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(f"{int(x):02d}" for x in ip.split("."))


def _header(port, gid_index: str, mtu: int) -> list[str]:
    dash = "-" * 87
    return [dash, "                    RDMA_Write BW Test",
            f" Dual-port       : OFF\t\tDevice         : {port.dev}",
            " Number of qps   : 1\t\tTransport type : IB",
            " Connection type : RC\t\tUsing SRQ      : OFF",
            " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128", " CQ Moderation   : 100",
            f" Mtu             : {mtu}[B]", " Link type       : Ethernet", f" GID index       : {gid_index}",
            " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet", dash]


def _addr_lines(local_ip: str, remote_ip: str) -> list[str]:
    return [" local address: LID 0000 QPN 0x0108 PSN 0x7a6bd RKey 0x1fffbd VAddr 0x007f1e4c4c5000",
            f" GID: {_gid_bytes(local_ip)}",
            " remote address: LID 0000 QPN 0x0109 PSN 0x3f6c9a RKey 0x1fffbe VAddr 0x007f5f5a7d0000",
            f" GID: {_gid_bytes(remote_ip)}", "-" * 87]


def _rx_prio(cfg, netdev: str, tclass: int) -> int:
    """The priority the receiving port gives a RoCE packet of traffic class ``tclass``: DSCP trust
    maps its DSCP (``tclass >> 2``) through the port's DSCP→priority table (default DSCP >> 3);
    PCP trust puts untagged traffic on priority 0."""
    from mfctl.mock.nics.qos import port

    q = port(cfg, netdev)
    if q is None or q.trust != "dscp":
        return 0
    dscp = tclass >> 2
    try:
        return int(q.dscp2prio[dscp])
    except (IndexError, KeyError, TypeError):
        return dscp >> 3


def ib_write_bw(cfg, argv, out, err) -> int:
    from mfctl.mock import rdmatools

    try:
        o = _opts(argv[1:])
    except ValueError as e:
        err(f" Invalid argument: {e}\n")
        return 1
    ports = {p.dev: p for p in rdmatools.ports(cfg.host)}
    me = ports.get(o["dev"]) if o["dev"] else next(iter(ports.values()), None)
    if me is None:
        err(f" IB device {o['dev']} not found\n Unable to find the Infiniband/RoCE device\n")
        return 1
    my_ip = next((a.split("/")[0] for a in me.addresses if ":" not in a), None)
    reg = _registry(cfg.host.testbed)
    if o["server"] is None:
        return _serve(cfg, o, me, my_ip, reg, out, err)
    return _client(cfg, o, me, my_ip, reg, out, err)


def _serve(cfg, o, me, my_ip, reg, out, err) -> int:
    key = (cfg.host.name, o["port"])
    slot = {"event": threading.Event(), "port": me, "ip": my_ip, "cfg": cfg, "result": None}
    with reg["lock"]:
        if key in reg["servers"]:
            err(" Couldn't listen to port %d\n Unable to open file descriptor for socket connection\n" % o["port"])
            return 1
        reg["servers"][key] = slot
    out("\n" + "*" * 36 + "\n* Waiting for client to connect... *\n" + "*" * 36 + "\n")
    try:
        if not slot["event"].wait(SERVER_WAIT_S):
            err(" Server timed out waiting for a client\n")
            return 1
    finally:
        with reg["lock"]:
            reg["servers"].pop(key, None)
    res = slot["result"]
    out("\n".join(_header(me, o["gid"] or "3", res["mtu"]) + _addr_lines(my_ip or "0.0.0.0", res["peer_ip"])) + "\n")
    if res["bw"] is None:
        out(res["fail"] + "\n")
        return 1
    out(_table(res) + "\n")
    return 0


def _table(res) -> str:
    return (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" {MSG_BYTES:<10} {res['iters']:<16}{res['bw'] * 1.002:<19.2f}{res['bw']:<21.2f}"
            f"{res['bw'] * 1e9 / 8 / MSG_BYTES / 1e6:.6f}\n" + "-" * 87)


def _joined(cfg_a, port_a, cfg_b, port_b) -> bool:
    """The client's lane reaches the server's: both up, and the OCS joins them, or both on the EPS."""
    la, lb = cfg_a.lane_for(port_a.netdev), cfg_b.lane_for(port_b.netdev)
    if la is None or lb is None or not (port_a.up and port_b.up):
        return False
    if la.ocs_tx is None and lb.ocs_tx is None:
        return True
    if la.ocs_tx is None or lb.ocs_tx is None:
        return False
    emu = cfg_a.host.testbed.ocs
    with emu.lock:
        return emu.patches.get(la.ocs_tx) == lb.ocs_rx and emu.patches.get(lb.ocs_tx) == la.ocs_rx


def _client(cfg, o, me, my_ip, reg, out, err) -> int:
    tb = cfg.host.testbed
    owner = next((h for h in tb.hosts.values() if h.config is not None and any(
        o["server"] == a.split("/")[0] for st in h.config.netdevs.values() for a in st.addresses)), None)
    slot = None
    if owner is not None:
        with reg["lock"]:
            slot = reg["servers"].get((owner.name, o["port"]))
    if slot is None:
        err(f" Couldn't connect to {o['server']}:{o['port']}\n Unable to open file descriptor for socket connection"
            " Unable to init the socket connection\n")
        return 1
    srv = slot["port"]
    mtu = roce_mtu(min(me.mtu, srv.mtu))
    res: dict = {"mtu": mtu, "peer_ip": my_ip or "0.0.0.0", "bw": None, "iters": 0,
           "fail": " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n scnt=128, ccnt=0"}
    if _joined(cfg, me, slot["cfg"], srv):
        rate = min(me.rate_gbps, srv.rate_gbps)
        bw = rate * mtu / (mtu + WIRE_OVERHEAD_B) * PROTOCOL_EFFICIENCY
        time.sleep(o["secs"] / tb.time_scale)
        moved = int(bw * 1e9 / 8 * o["secs"])
        prio = _rx_prio(slot["cfg"], srv.netdev, o["tclass"])
        with reg["lock"]:
            for k in ((slot["cfg"].host.name, srv.netdev, "rx", prio), (cfg.host.name, me.netdev, "tx", prio)):
                reg["bytes"][k] = reg["bytes"].get(k, 0) + moved
        res.update(bw=round(bw, 2), iters=int(moved / MSG_BYTES))
    slot["result"] = res
    slot["event"].set()
    out("\n".join(_header(me, o["gid"] or "3", mtu) + _addr_lines(my_ip or "0.0.0.0", slot["ip"] or "0.0.0.0")) + "\n")
    if res["bw"] is None:
        out(res["fail"] + "\n")
        return 1
    out(_table(res) + "\n")
    return 0
