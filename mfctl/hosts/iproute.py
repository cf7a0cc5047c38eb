"""``ip -j link show`` (iproute2 JSON) — command builder and parser."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mfctl.errors import ParseError

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


def parse_links(text: str) -> dict[str, Link]:
    """Parse iproute2's JSON link list. Raises ParseError on non-JSON or wrong shape."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        bad = text.splitlines()[e.lineno - 1] if text.splitlines() else ""
        raise ParseError(TOOL, e.lineno, "a JSON array of links", bad) from None
    if not isinstance(doc, list):
        raise ParseError(TOOL, 1, "a JSON array of links", text[:80])
    out = {}
    for k, o in enumerate(doc):
        if not isinstance(o, dict) or "ifname" not in o:
            raise ParseError(TOOL, 1, f"link object {k} with 'ifname'", str(o)[:80])
        flags = o.get("flags") or []
        out[o["ifname"]] = Link(o["ifname"], str(o.get("operstate", "UNKNOWN")), o.get("mtu"), "LOWER_UP" in flags)
    return out


def addr_argv() -> list[str]:
    return ["ip", "-j", "addr", "show"]


@dataclass
class Iface:
    ifname: str
    mtu: int | None
    up: bool
    addresses: list[str]  # "198.18.1.1/24"


def parse_addrs(text: str) -> dict[str, Iface]:
    """Parse ``ip -j addr show``."""
    links = parse_links(text)
    doc = json.loads(text)
    out = {}
    for o in doc:
        addrs = [f"{a['local']}/{a['prefixlen']}" for a in o.get("addr_info") or [] if "local" in a and "prefixlen" in a]
        link = links[o["ifname"]]
        out[o["ifname"]] = Iface(o["ifname"], link.mtu, link.up, addrs)
    return out
