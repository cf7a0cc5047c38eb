"""``ip -j link show`` (iproute2 JSON) — command builder and parser."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mfctl.errors import ParseError
from mfctl.hosts.textin import line_at, normalized

TOOL = "ip -j link"


def link_argv() -> list[str]:
    return ["ip", "-j", "link", "show"]


@dataclass
class Link:
    ifname: str
    operstate: str  # UP, DOWN, UNKNOWN, ...
    mtu: int | None
    carrier: bool  # LOWER_UP in flags

    @property
    def up(self) -> bool:
        return self.operstate == "UP" and self.carrier


def _load(text: str, tool: str) -> list:
    """The JSON array of ``ip -j`` output; ParseError naming the line json stopped at (which may
    be just past the last one: whitespace-only output, or JSON cut at a line boundary)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(tool, e.lineno, "a JSON array of links", line_at(text, e.lineno)) from None
    if not isinstance(doc, list):
        raise ParseError(tool, 1, "a JSON array of links", text.strip()[:80])
    for k, o in enumerate(doc):
        if not isinstance(o, dict) or not isinstance(o.get("ifname"), str):
            raise ParseError(tool, 1, f"link object {k} with 'ifname'", str(o)[:80])
    return doc


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@normalized
def parse_links(text: str) -> dict[str, Link]:
    """Parse iproute2's JSON link list. Raises ParseError on non-JSON or wrong shape."""
    out = {}
    for o in _load(text, TOOL):
        flags = o.get("flags") if isinstance(o.get("flags"), list) else []
        out[o["ifname"]] = Link(o["ifname"], str(o.get("operstate", "UNKNOWN")), _int(o.get("mtu")), "LOWER_UP" in flags)
    return out


def addr_argv() -> list[str]:
    return ["ip", "-j", "addr", "show"]


@dataclass
class Iface:
    ifname: str
    mtu: int | None
    up: bool
    addresses: list[str]  # "198.18.1.1/24"


@normalized
def parse_addrs(text: str) -> dict[str, Iface]:
    """Parse ``ip -j addr show``."""
    links = parse_links(text)
    doc = _load(text, "ip -j addr")
    out = {}
    for o in doc:
        info = o.get("addr_info") if isinstance(o.get("addr_info"), list) else []
        addrs = [f"{a['local']}/{a['prefixlen']}" for a in info if isinstance(a, dict) and "local" in a and "prefixlen" in a]
        link = links[o["ifname"]]
        out[o["ifname"]] = Iface(o["ifname"], link.mtu, link.up, addrs)
    return out
