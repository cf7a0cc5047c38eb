"""Links and transceivers of the mock host: ``devlink -j port show``, ``ethtool`` (link, ``-S``,
``-m`` SFF-8636), ``ip link set`` / ``ip addr replace|del``. A lane's received power follows the
OCS cross-connects (transmit power of the far lane minus the OCS insertion loss, split over the
channels that lane's sub-port uses); ConnectX ports are not splittable with devlink (the mlx5 driver
does not support it), so a breakout change needs firmware (MODULE_SPLIT)."""

from __future__ import annotations

import json
import math
import random

from mfctl.mock.nics.state import MODULE_CHANNELS


def devlink(cfg, args, out, err):
    """``devlink -j port show`` as mlx5 prints it (kernels before 6.5): one physical port per PCI
    function, named ``pci/<function's address>/<index>`` where the uplink's index is
    ``(pf << 16) | 0xffff`` (65535, 131071, ...), ``port`` the physical port number, never
    splittable (ironcore-dev/dpservice#499 shows the real lines)."""
    if args[:3] != ["-j", "port", "show"]:
        err("devlink: only '-j port show' is modelled; port split is not supported by mlx5\n")
        return 95  # EOPNOTSUPP like the kernel
    ports = {}
    for nic in cfg.nics.values():
        for k, nd in enumerate(nic.netdevs):
            fn = int(nic.pci_of(k).rsplit(".", 1)[1])
            dev = (f"auxiliary/mlx5_core.eth.{len(ports)}" if getattr(cfg, "devlink_bus", "pci") == "auxiliary"
                   else f"pci/{nic.pci_of(k)}")
            ports[f"{dev}/{(fn << 16) | 0xFFFF}"] = {"type": "eth", "netdev": nd, "flavour": "physical", "port": k,
                                                     "splittable": False}
    out(json.dumps({"port": ports}) + "\n")
    return 0


def ethtool(cfg, args, out, err):
    if not args:
        err("ethtool: bad command line argument(s)\n")
        return 1
    module = args[0] == "-m"
    if args[0] == "-s":
        return set_link(cfg, args, out, err)
    if args[0] == "-S" and len(args) > 1:
        nic = next((n for n in cfg.nics.values() if args[1] in n.netdevs), None)
        if nic is None:
            err(f"netlink error: no device matches name ({args[1]})\n")
            return 1
        # RoCE traffic (DSCP 26) lands on its dscp2prio priority once this port trusts DSCP and has PFC there, else on 0
        from mfctl.mock.nics.qos import port

        q = port(cfg, args[1])
        prio = q.dscp2prio[26] if q is not None and q.trust == "dscp" and q.pfc[q.dscp2prio[26]] else 0
        lines = ["NIC statistics:", "     rx_packets: 912345678", "     tx_packets: 923456789",
                 "     rx_bytes: 2202570777997", "     tx_bytes: 2662454044895"]
        from mfctl.mock.nics.perftest import prio_bytes

        moved = prio_bytes(cfg, args[1])  # what ib_write_bw sent/received here, by (rx|tx, priority)
        for p in range(8):
            for d, v in (("rx", 2202570777997), ("tx", 2662454044895)):
                lines.append(f"     {d}_prio{p}_bytes: {(v if p == prio else 0) + moved.get((d, p), 0)}")
                lines.append(f"     {d}_prio{p}_packets: {v // 4096 if p == prio else 0}")
        for c in ("rx_out_of_buffer", "rx_crc_errors_phy", "rx_in_range_len_errors_phy", "rx_symbol_err_phy",
                  "rx_discards_phy", "tx_discards_phy", "tx_errors_phy", "rx_pcs_symbol_err_phy"):
            lines.append(f"     {c}: {nic.errors.get(c, 0)}")  # mlx5 names, as in the ConnectX captures
        out("\n".join(lines) + "\n")
        return 0
    nd = args[1] if module and len(args) > 1 else args[0]
    lane = cfg.lane_for(nd)
    nic = next((n for n in cfg.nics.values() if nd in n.netdevs), None)
    if lane is None or nic is None:
        err(f"netlink error: no device matches name ({nd})\n")
        return 1
    if module:
        out(module_text(cfg, lane))
        return 0
    from mfctl.mock.nics.qos import PortState, port

    st = port(cfg, nd) or PortState()
    up = cfg.host.lane_up(lane)
    own = native_mode(nic)
    speed, lanes = st.forced or own
    modes = link_modes(nic)
    adv = [m for m in modes if _mode(m) == (speed, lanes)] if not st.autoneg else modes
    up = up and (speed, lanes) == own  # a port forced to another mode than its sub-port's lanes carry stays down
    out(f"Settings for {nd}:\n\tSupported ports: [ FIBRE ]\n" + _modes_block("Supported link modes", modes)
        + "\tSupported pause frame use: Symmetric\n\tSupports auto-negotiation: Yes\n\tSupported FEC modes: None RS BASER\n"
        + _modes_block("Advertised link modes", adv)
        + f"\tAdvertised pause frame use: Symmetric\n\tAdvertised auto-negotiation: {'Yes' if st.autoneg else 'No'}\n"
        f"\tAdvertised FEC modes: {'RS' if st.fec in ('RS', 'Auto') else st.fec}\n"
        f"\tSpeed: {str(speed) + 'Mb/s' if up else 'Unknown!'}\n" + (f"\tLanes: {lanes}\n" if up else "")
        + f"\tDuplex: {'Full' if up else 'Unknown! (255)'}\n\tAuto-negotiation: {'on' if st.autoneg else 'off'}\n"
        "\tPort: FIBRE\n\tPHYAD: 0\n\tTransceiver: internal\n"
        f"\tLink detected: {'yes' if up else 'no'}\n")
    return 0


def native_mode(nic) -> tuple[int, int]:
    """(Mb/s, lanes) of each sub-port of ``nic``: the port's speed split evenly, on its lanes split evenly."""
    return int(nic.speed_gbps * 1000 / len(nic.netdevs)), max(MODULE_CHANNELS // nic.split, 1)


def link_modes(nic) -> list[str]:
    """The link modes a sub-port of ``nic`` supports, as ethtool names them: the module's 25G-per-lane
    mode on the sub-port's lanes (``100000baseSR4``, ``50000baseSR2``, ``25000baseSR``; WDM modules on
    duplex LC as ``LR4_ER4``, the name mlx5 gives 100G CWDM4/LR4) and, on 4 or 1 lanes, the 10G-per-lane
    one (``40000baseSR4``, ``10000baseSR``)."""
    from mfctl.provision.breakout import MODULES

    lanes = native_mode(nic)[1]
    mod = MODULES.get(nic.optics)
    if mod is not None and not mod.parallel and lanes == 4:
        return ["100000baseLR4_ER4/Full", "40000baseLR4/Full"]
    if lanes == 2:
        return ["50000baseSR2/Full"]
    n = "" if lanes == 1 else str(lanes)
    return [f"{25000 * lanes}baseSR{n}/Full", f"{10000 * lanes}baseSR{n}/Full"]


def _mode(name: str) -> tuple[int, int] | None:
    import re

    m = re.match(r"^(\d+)base[A-Za-z]+?(\d*)(?:_\w+)?/Full$", name)
    return (int(m[1]), int(m[2] or 1)) if m else None


def _modes_block(title: str, modes: list[str]) -> str:
    if not modes:
        return f"\t{title}:  Not reported\n"
    pad = "\t" + " " * (len(title) + 4)
    return f"\t{title}:   {modes[0]}\n" + "".join(f"{pad}{m}\n" for m in modes[1:])


def set_link(cfg, args, out, err) -> int:
    """``ethtool -s IF [speed N] [lanes L] [autoneg on|off]``: with autoneg off the mode must be one the
    port supports (else the netlink ethtool's ``link settings update failed`` / ``Invalid argument``)."""
    from mfctl.mock.nics.qos import port

    nd = args[1] if len(args) > 1 else ""
    st = port(cfg, nd)
    nic = next((n for n in cfg.nics.values() if nd in n.netdevs), None)
    if st is None or nic is None:
        err(f"netlink error: no device matches name ({nd})\n")
        return 1
    kv = dict(zip(args[2::2], args[3::2], strict=False))
    if len(args[2:]) % 2 or not set(kv) <= {"speed", "lanes", "autoneg", "duplex"} \
            or any(not kv[k].isdigit() for k in ("speed", "lanes") if k in kv) or kv.get("autoneg", "on") not in ("on", "off"):
        err("ethtool: bad command line argument(s)\nFor more information run ethtool -h\n")
        return 1
    autoneg = kv.get("autoneg", "on" if st.autoneg else "off") == "on"
    cur = st.forced or native_mode(nic)
    want = (int(kv.get("speed", cur[0])), int(kv.get("lanes", cur[1])))
    if not autoneg and want not in {_mode(m) for m in link_modes(nic)}:
        err("netlink error: link settings update failed\nnetlink error: Invalid argument\n")
        return 1
    st.autoneg, st.forced = autoneg, (None if autoneg else want)
    return 0

def module_text(cfg, lane) -> str:
    """``ethtool -m`` of the module behind ``lane``'s netdev (SFF-8636): the whole module, whichever
    sub-port asks. The identity lines are the inventory's optics class (CWDM4 on LC, SR4/PSM4 on MPO:
    :data:`mfctl.provision.breakout.MODULES`); each channel's received power follows the OCS circuit
    of the sub-port whose fibre pair it is (channels handed out in order over the NIC's wired
    sub-ports, :meth:`NICState.subport_channels`), the sub-port's power shared over its channels."""
    from mfctl.provision.breakout import MODULES

    nic = next((n for n in cfg.nics.values() if lane.netdev in n.netdevs), None)
    mod = MODULES.get(nic.optics if nic else "100G-CWDM4") or MODULES["100G-CWDM4"]
    wired = [cfg.lane_for(nic.netdev_of(k)) for k in range(nic.wired)] if nic else [lane]
    per = max(MODULE_CHANNELS // max(len(wired), 1), 1)
    tb = cfg.host.testbed
    rnd = random.Random(lane.netdev if nic is None else nic.pci)
    lines = [f"Identifier                                : {mod.identifier}",
             f"Connector                                 : {mod.connector_line}",
             f"Transceiver type                          : {mod.transceiver}",
             f"Vendor name                               : {mod.vendor}",
             f"Vendor PN                                 : {mod.part_number}",
             "Revision Compliance                       : SFF-8636 Rev 2.5/2.6/2.7",
             f"Module temperature                        : {33 + rnd.random() * 3:.2f} degrees C / 93.00 degrees F",
             "Module voltage                            : 3.2505 V"]
    offs = [rnd.uniform(-0.4, 0.4) for _ in range(MODULE_CHANNELS)]
    offs = [o - sum(offs) / MODULE_CHANNELS for o in offs]
    for c in range(1, MODULE_CHANNELS + 1):
        lines.append(f"Laser tx bias current (Channel {c})         : {38 + rnd.random() * 4:.3f} mA")
    for c in range(1, MODULE_CHANNELS + 1):
        lines.append(f"Transmit avg optical power (Channel {c})    : {_mw(-5.0 + offs[c - 1])}")
    for c in range(1, MODULE_CHANNELS + 1):
        owner = wired[min((c - 1) // per, len(wired) - 1)]
        rx_total = None
        if owner is not None and owner.ocs_rx is not None:
            p = tb.ocs.port_power(owner.ocs_rx)
            rx_total = p if p > -50 else None
        dbm = -40.0 if rx_total is None else rx_total - 10 * math.log10(per) + offs[c - 1]
        lines.append(f"Rcvr signal avg optical power(Channel {c})  : {_mw(dbm)}")
    lines += ["Laser output power low warning threshold  : 0.1862 mW / -7.30 dBm",  # 100GBASE-SR4 lane: -8.4 dBm min
              "Laser output power low alarm threshold    : 0.0933 mW / -10.30 dBm",
              "Laser rx power high alarm threshold       : 2.2387 mW / 3.50 dBm",
              "Laser rx power low alarm threshold        : 0.0251 mW / -16.00 dBm",
              "Laser rx power high warning threshold     : 1.7783 mW / 2.50 dBm",
              "Laser rx power low warning threshold      : 0.0631 mW / -12.00 dBm"]
    return "\n".join(lines) + "\n"


def ip_set(cfg, args, out, err) -> int:
    """ip link set dev IF mtu N | ip addr replace A/P dev IF | ip addr flush dev IF"""
    if args[:2] == ["link", "set"] and "mtu" in args and "dev" in args:
        nd = args[args.index("dev") + 1]
        if nd not in cfg.netdevs:
            err(f'Cannot find device "{nd}"\n')
            return 1
        mtu = args[args.index("mtu") + 1]
        if not mtu.isdigit() or not 68 <= int(mtu) <= 9978:
            err(f'Error: argument "{mtu}" is wrong: Invalid "mtu" value\n')
            return 1
        cfg.netdevs[nd].mtu = int(mtu)
        return 0
    if args[:2] == ["addr", "replace"] and len(args) >= 5 and args[3] == "dev":
        nd, addr = args[4], args[2]
        if nd not in cfg.netdevs:
            err(f'Cannot find device "{nd}"\n')
            return 1
        if addr not in cfg.netdevs[nd].addresses:
            cfg.netdevs[nd].addresses.append(addr)
        return 0
    if args[:2] == ["addr", "del"] and len(args) >= 5 and args[3] == "dev":
        nd, addr = args[4], args[2]
        if nd in cfg.netdevs and addr in cfg.netdevs[nd].addresses:
            cfg.netdevs[nd].addresses.remove(addr)
            return 0
        err("RTNETLINK answers: Cannot assign requested address\n")
        return 2
    return -1


def _mw(dbm: float) -> str:
    if dbm <= -40:
        return "0.0001 mW / -40.00 dBm"
    return f"{10 ** (dbm / 10):.4f} mW / {dbm:.2f} dBm"
