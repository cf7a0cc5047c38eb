"""``devlink port show`` as plain text (iproute2's default output; ``devlink -j port show`` is
:func:`mfctl.hosts.mellanox.parse_devlink_ports`).

One line per port: ``BUS/DEVICE/INDEX: key value key value …`` (``type eth netdev enp8s0f0np0
flavour physical port 0 splittable true lanes 8``; a VF: ``flavour pcivf controller 0 pfnum 0 vfnum 0
external false``), then indented nested blocks under the port (``  function:`` /
``    hw_addr 1a:33:f2:e7:64:d8 state inactive opstate detached``, ``  stats:`` …). Keys and values
come in pairs (iproute2 ``devlink/devlink.c`` pr_out_port). Returns the same ports, keyed the same
way, as the JSON parser, with the text's other attributes kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.mellanox import DevlinkPort
from mfctl.hosts.textin import normalized

_PORT = re.compile(r"^(?P<name>[^\s/]+/[^\s/]+/\d+):\s*(?P<rest>.*)$")


def port_show_argv() -> list[str]:
    return ["devlink", "port", "show"]


@dataclass
class DevlinkPortText(DevlinkPort):
    """A :class:`mfctl.hosts.mellanox.DevlinkPort` read from the text, with the attributes the
    text adds: ``port`` (the physical port number), PF/VF numbers, ``external``, and each nested
    block (``function``, ``stats``) as its key/value pairs."""

    type: str | None = None
    port: int | None = None
    pfnum: int | None = None
    vfnum: int | None = None
    controller: int | None = None
    external: bool | None = None
    attrs: dict[str, str] = field(default_factory=dict)  # every key/value pair of the port's line
    nested: dict[str, dict[str, str]] = field(default_factory=dict)  # "function" → {"hw_addr": …}


def _pairs(no: int, text: str) -> dict[str, str]:
    toks = text.split()
    if len(toks) % 2:
        raise ParseError("devlink port show", no, "'key value' pairs", text)
    return dict(zip(toks[::2], toks[1::2]))


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.isdigit() else None


@normalized
def parse_port_show(text: str) -> dict[str, DevlinkPortText]:
    """Parse ``devlink port show`` (text) into ports keyed by netdev (or port name). Raises
    ParseError naming the line that is neither a port line nor an indented block under one."""
    out: dict[str, DevlinkPortText] = {}
    cur: DevlinkPortText | None = None
    block: str | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if raw[:1].isspace():
            if cur is None:
                raise ParseError("devlink port show", no, "a 'BUS/DEV/INDEX:' port line before an indented one", raw)
            s = raw.strip()
            if s.endswith(":") and " " not in s:
                block = s[:-1]
                cur.nested.setdefault(block, {})
            else:
                cur.nested.setdefault(block or "", {}).update(_pairs(no, s))
            continue
        m = _PORT.match(raw.strip())
        if not m:
            raise ParseError("devlink port show", no, "'BUS/DEV/INDEX: type … netdev … flavour …'", raw.strip())
        kv = _pairs(no, m["rest"])
        sp = kv.get("splittable")
        ext = kv.get("external")
        cur = DevlinkPortText(m["name"], kv.get("netdev"), kv.get("flavour"), sp == "true", _int(kv.get("lanes")),
                              _int(kv.get("split_group")), type=kv.get("type"), port=_int(kv.get("port")),
                              pfnum=_int(kv.get("pfnum")), vfnum=_int(kv.get("vfnum")),
                              controller=_int(kv.get("controller")),
                              external=None if ext is None else ext == "true", attrs=kv)
        block = None
        out[cur.netdev or cur.name] = cur
    if not out:
        raise ParseError("devlink port show", None, "at least one 'BUS/DEV/INDEX: …' port line", text.strip()[:80])
    return out
