"""RDMA tools: ``ibstat``, ``ibstatus``, ``ibdev2netdev``, ``show_gids``.

Parsers take text and return typed data; anything unexpected is a ParseError naming the
tool and the line. Trailing tool errors (``ibpanic: …``) are kept as ``errors``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized


@dataclass
class RdmaPort:
    device: str
    port: int
    state: str  # Active, Down, Init, …
    physical_state: str | None
    rate_gbps: float | None
    link_layer: str | None

    @property
    def active(self) -> bool:
        return self.state.lower() == "active"


@dataclass
class RdmaReport:
    ports: list[RdmaPort] = field(default_factory=list)
    firmware: dict[str, str] = field(default_factory=dict)  # device → firmware version
    errors: list[str] = field(default_factory=list)


def _cut(tool: str, what: str, line_no: int | None, got: str = "") -> ParseError:
    return ParseError(tool, line_no, f"{what} (the output looks cut inside a device block)", got)


@normalized
def parse_ibstat(text: str) -> RdmaReport:
    """``ibstat``: ``CA 'mlx5_0'`` blocks with indented ``Key: value`` and ``Port N:`` sections.
    A CA with fewer ``Port N:`` sections than its ``Number of ports``, a port without ``State``, or
    a last port cut before its ``Link layer`` (when the others have one) is a ParseError, never a
    device silently missing its port."""
    rep = RdmaReport()
    ca = None
    port: dict | None = None
    cas: list[dict] = []  # {"name", "line", "declared", "ports"}

    def flush():
        if port is not None:
            if "State" not in port:
                raise _cut("ibstat", f"a 'State:' line in {ca} port {port['n']}", port["line"])
            rep.ports.append(RdmaPort(ca, port["n"], port["State"], port.get("Physical state"),
                                      float(port["Rate"]) if port.get("Rate", "").replace(".", "", 1).isdigit() else None,
                                      port.get("Link layer")))
            cas[-1]["ports"] += 1

    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r"^CA '([^']+)'$", s)
        if m:
            flush()
            ca, port = m.group(1), None
            cas.append({"name": ca, "line": no, "declared": None, "ports": 0})
            continue
        if s.startswith("ibpanic:") or s.startswith("ibwarn:"):
            rep.errors.append(s)
            continue
        if ca is None:
            raise ParseError("ibstat", no, "\"CA 'device'\"", s)
        m = re.match(r"^Port (\d+):$", s)
        if m:
            flush()
            port = {"n": int(m.group(1)), "line": no}
            continue
        m = re.match(r"^([A-Za-z ]+):\s*(.*)$", s)
        if not m:
            raise ParseError("ibstat", no, "'Key: value'", s)
        if port is not None:
            port[m.group(1)] = m.group(2)
        elif m.group(1) == "Firmware version":
            rep.firmware[ca] = m.group(2)
        elif m.group(1) == "Number of ports" and m.group(2).isdigit():
            cas[-1]["declared"] = int(m.group(2))
    last_port = port
    flush()
    for c in cas:
        want = c["declared"] if c["declared"] is not None else 1
        if c["ports"] < want:
            raise _cut("ibstat", f"{want} 'Port N:' section(s) in CA '{c['name']}'", c["line"], f"CA '{c['name']}'")
    if last_port is not None and "Link layer" not in last_port and any(p.link_layer for p in rep.ports[:-1]):
        raise _cut("ibstat", f"a 'Link layer:' line in {ca} port {last_port['n']}", last_port["line"])
    if not rep.ports:
        raise ParseError("ibstat", None, "at least one 'Port N:' section", text.strip()[:80])
    return rep


@normalized
def parse_ibstatus(text: str) -> RdmaReport:
    """``ibstatus``: ``Infiniband device 'mlx5_0' port 1 status:`` blocks."""
    rep = RdmaReport()
    cur: dict | None = None

    def flush():
        if cur:
            if "state" not in cur:
                raise _cut("ibstatus", f"a 'state:' line for {cur['dev']} port {cur['port']}", cur["line"])
            rate = re.match(r"^([\d.]+)", cur.get("rate", ""))
            state = cur.get("state", "?").split(":")[-1].strip().capitalize()
            rep.ports.append(RdmaPort(cur["dev"], cur["port"], state, cur.get("phys state", "").split(":")[-1].strip() or None,
                                      float(rate.group(1)) if rate else None, cur.get("link_layer")))

    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r"^Infiniband device '([^']+)' port (\d+) status:$", s)
        if m:
            flush()
            cur = {"dev": m.group(1), "port": int(m.group(2)), "line": no}
            continue
        m = re.match(r"^([a-z_ ]+):\s+(.*)$", s)
        if not m or cur is None:
            raise ParseError("ibstatus", no, "'Infiniband device ... status:' or 'key: value'", s)
        cur[m.group(1)] = m.group(2)
    last = cur
    flush()
    if last and "link_layer" not in last and any(p.link_layer for p in rep.ports[:-1]):
        raise _cut("ibstatus", f"a 'link_layer:' line for {last['dev']} port {last['port']}", last["line"])
    if not rep.ports:
        raise ParseError("ibstatus", None, "at least one device block", text.strip()[:80])
    return rep


@normalized
def parse_ibdev2netdev(text: str) -> dict[str, tuple[int, str, bool]]:
    """``mlx5_2 port 1 ==> ibp75s0 (Up)`` → ``{device: (port, netdev, up)}``."""
    out = {}
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r"^(\S+) port (\d+) ==> (\S+) \((Up|Down)\)$", s)
        if not m:
            raise ParseError("ibdev2netdev", no, "'DEV port N ==> NETDEV (Up|Down)'", s)
        out[m.group(1)] = (int(m.group(2)), m.group(3), m.group(4) == "Up")
    if not out:
        raise ParseError("ibdev2netdev", 1, "at least one mapping", "")
    return out


@dataclass
class Gid:
    device: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    version: str  # v1 / v2
    netdev: str


@normalized
def parse_show_gids(text: str) -> list[Gid]:
    """``show_gids`` table (DEV PORT INDEX GID IPv4 VER DEV); the IPv4 column may be empty."""
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith(("DEV", "---", "n_gids_found")):
            continue
        f = s.split()
        if len(f) == 6:
            f.insert(4, "")
        if len(f) != 7 or not f[1].isdigit() or not f[2].isdigit() or f[5] not in ("v1", "v2"):
            raise ParseError("show_gids", no, "DEV PORT INDEX GID [IPv4] v1|v2 NETDEV", s)
        out.append(Gid(f[0], int(f[1]), int(f[2]), f[3], f[4] or None, f[5], f[6]))
    return out


def roce_v2_ipv4_gid_index(gids: list[Gid], netdev: str) -> int | None:
    """The GID index NCCL_IB_GID_INDEX should use on ``netdev``: RoCE v2 with an IPv4 address."""
    for g in gids:
        if g.netdev == netdev and g.version == "v2" and g.ipv4:
            return g.index
    return None


@normalized
def parse_ibv_devinfo(text: str) -> RdmaReport:
    """``ibv_devinfo``: ``hca_id: mlx5_0`` blocks, ``port: N`` sub-blocks with
    ``state: PORT_ACTIVE (4)`` and ``link_layer: Ethernet``. A device with fewer ``port:`` blocks
    than its ``phys_port_cnt`` (none at all without one), a port without ``state``, or a last port
    cut before its ``link_layer`` (when the others have one) is a ParseError: the output was cut."""
    rep = RdmaReport()
    dev = None
    port: dict | None = None
    devs: list[dict] = []

    def flush():
        if port is not None:
            if "state" not in port:
                raise _cut("ibv_devinfo", f"a 'state:' line in {dev} port {port['n']}", port["line"])
            st = re.sub(r"^PORT_|\s*\(\d+\)$", "", port["state"]).capitalize()
            rep.ports.append(RdmaPort(dev, port["n"], st, port.get("phys_state"), None, port.get("link_layer")))
            devs[-1]["ports"] += 1

    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r"^hca_id:\s*(\S+)$", s)
        if m:
            flush()
            dev, port = m.group(1), None
            devs.append({"name": dev, "line": no, "declared": None, "ports": 0})
            continue
        m = re.match(r"^port:\s*(\d+)$", s)
        if m and dev is not None:
            flush()
            port = {"n": int(m.group(1)), "line": no}
            continue
        m = re.match(r"^([A-Za-z_][\w \[\].-]*?):\s*(.*)$", s)
        if dev is None:
            raise ParseError("ibv_devinfo", no, "'hca_id: DEV', 'port: N' or 'key: value'", s)
        if not m:  # ibv_devinfo -v: a flag list continues the key above it (device_cap_flags, …)
            continue
        if port is not None:
            port[m.group(1)] = m.group(2)
        elif m.group(1) == "fw_ver":
            rep.firmware[dev] = m.group(2)
        elif m.group(1) == "phys_port_cnt" and m.group(2).isdigit():
            devs[-1]["declared"] = int(m.group(2))
    last_port = port
    flush()
    for d in devs:
        want = d["declared"] if d["declared"] is not None else 1
        if d["ports"] < want:
            raise _cut("ibv_devinfo", f"{want} 'port: N' block(s) in {d['name']}", d["line"], f"hca_id: {d['name']}")
    if last_port is not None and "link_layer" not in last_port and any(p.link_layer for p in rep.ports[:-1]):
        raise _cut("ibv_devinfo", f"a 'link_layer:' line in {dev} port {last_port['n']}", last_port["line"])
    if not rep.ports:
        raise ParseError("ibv_devinfo", None, "at least one 'port: N' block", text.strip()[:80])
    return rep
