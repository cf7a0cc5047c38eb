"""RoCE port state per netdev: ``mlnx_qos -i IF`` in full (trust, dscp2prio, PFC, ETS per TC;
MLNX_OFED's mlnx_qos, NVIDIA community DOC-2792), ``ethtool --show-fec IF`` and the ECN/CNP
sysfs files read with ``grep -Hs . PATH…`` (NVIDIA MLNX_OFED "Explicit Congestion Notification
(ECN)": ``/sys/class/net/IF/ecn/roce_np|roce_rp/enable/<prio>``, ``roce_np/cnp_dscp``,
``roce_np/cnp_802p_prio``). Command builders take validated names; parsers take text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized


@dataclass
class PortQos:
    """One port's QoS: ``trust`` (pcp|dscp), ``pfc`` (0/1 per priority 0..7), ``dscp2prio``
    (DSCP → priority; only printed under DSCP trust, else empty), ``tc_bw`` (ETS % per TC, None
    for a TC that is not ETS) and ``prio_tc`` (priority → TC)."""

    trust: str | None
    pfc: list[int]
    dscp2prio: dict[int, int] = field(default_factory=dict)
    tc_bw: list[int | None] = field(default_factory=lambda: [None] * 8)
    prio_tc: dict[int, int] = field(default_factory=dict)


def mlnx_qos_argv(netdev: str, *, trust: str | None = None, pfc: list[int] | None = None,
                  dscp2prio: dict[int, int] | None = None, tc_bw: list[int] | None = None) -> list[str]:
    """``mlnx_qos -i IF [--trust T] [--pfc a,…,h] [--dscp2prio set,D,P …] [--tc_bw a,…,h]``."""
    argv = ["mlnx_qos", "-i", netdev]
    if trust:
        argv += ["--trust", trust]
    if pfc is not None:
        argv += ["--pfc", ",".join(map(str, pfc))]
    for d, p in sorted((dscp2prio or {}).items()):
        argv += ["--dscp2prio", f"set,{d},{p}"]
    if tc_bw is not None:
        argv += ["--tc_bw", ",".join(map(str, tc_bw))]
    return argv


@normalized
def parse_mlnx_qos(text: str) -> PortQos:
    """Parse mlnx_qos's report. Raises ParseError without a PFC ``enabled`` row."""
    trust: str | None = None
    pfc: list[int] | None = None
    d2p: dict[int, int] = {}
    bw: list[int | None] = [None] * 8
    ptc: dict[int, int] = {}
    tc: int | None = None
    for raw in text.splitlines():
        s = raw.strip()
        if m := re.match(r"^Priority trust (?:state|mode):\s*(\S+)", s):
            trust = m[1]
        elif m := re.match(r"^prio:\s*([0-7])\s+dscp:\s*([\d,\s]*)$", s):
            for d in filter(None, (x.strip() for x in m[2].split(","))):
                d2p[int(d)] = int(m[1])
        elif m := re.match(r"^enabled\s+((?:[01]\s*){8})$", s):
            pfc = [int(x) for x in m[1].split()]
        elif m := re.match(r"^tc:\s*([0-7])\s+ratelimit:.*?tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?", s):
            tc = int(m[1])
            bw[tc] = int(m[3]) if m[2] == "ets" and m[3] is not None else None
        elif (m := re.match(r"^priority:\s*([0-7])$", s)) and tc is not None:
            ptc[int(m[1])] = tc
    if pfc is None:
        raise ParseError("mlnx_qos", None, "a PFC 'enabled 0 0 0 1 0 0 0 0' row", text.strip()[:80])
    return PortQos(trust, pfc, d2p, bw, ptc)


def fec_show_argv(netdev: str) -> list[str]:
    return ["ethtool", "--show-fec", netdev]


def fec_set_argv(netdev: str, encoding: str) -> list[str]:
    return ["ethtool", "--set-fec", netdev, "encoding", encoding]


@normalized
def parse_fec(text: str) -> tuple[str, str]:
    """``ethtool --show-fec``: (configured, active), e.g. ("Auto", "RS"); older ethtool prints
    ``Configured FEC encodings:``, the netlink one ``Supported/Configured FEC encodings:``."""
    conf = active = None
    for raw in text.splitlines():
        if m := re.match(r"^\s*(?:Supported/)?Configured FEC encodings:\s*(.+?)\s*$", raw):
            conf = m[1]
        elif m := re.match(r"^\s*Active FEC encodings?:\s*(.+?)\s*$", raw):
            active = m[1]
    if conf is None or active is None:
        raise ParseError("ethtool --show-fec", None, "'Configured FEC encodings:' and 'Active FEC encoding:' lines",
                         text.strip()[:80])
    return conf, active


def ecn_paths(netdev: str) -> list[str]:
    """The ECN/CNP files of one port: enable per priority for both algorithms, CNP DSCP and priority."""
    base = f"/sys/class/net/{netdev}/ecn"
    return ([f"{base}/{alg}/enable/{p}" for alg in ("roce_np", "roce_rp") for p in range(8)]
            + [f"{base}/roce_np/cnp_dscp", f"{base}/roce_np/cnp_802p_prio"])


def grep_argv(paths: list[str]) -> list[str]:
    """``grep -Hs . PATH…``: each existing file as ``PATH:VALUE`` (missing files are left out, exit 2)."""
    return ["grep", "-Hs", ".", *paths]


@normalized
def parse_grep(text: str) -> dict[str, str]:
    """``grep -H`` output → {path: value}. Raises ParseError on a line without ``:``."""
    out = {}
    for k, raw in enumerate(text.splitlines(), 1):
        if not raw:
            continue
        path, sep, val = raw.partition(":")
        if not sep or not path.startswith("/"):
            raise ParseError("grep -H", k, "PATH:VALUE", raw)
        out[path] = val.strip()
    return out


def write_argv(path: str, value: int) -> list[str]:
    """``sh -c 'echo V > PATH'``: how sysfs files are written (``path`` built from validated names)."""
    # (the path holds a netdev name the host reported: no "..", so it stays under /sys or /proc/sys)
    if not re.fullmatch(r"/(?:sys|proc/sys)/[A-Za-z0-9_./-]+", path) or ".." in path.split("/"):
        raise ValueError(f"{path!r} is not a sysfs/procfs path")
    return ["sh", "-c", f"echo {int(value)} > {path}"]
