"""Multi-rail routing state: ``ip -j rule show`` and ``ip -j route show table all`` (iproute2
JSON), and the per-interface ARP/rp_filter sysctls (kernel Documentation/networking/ip-sysctl.rst:
the kernel uses max(conf/all, conf/IF) for ``arp_ignore``, ``arp_announce`` and ``rp_filter``)."""

from __future__ import annotations

import json

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

SYSCTLS = ("arp_ignore", "arp_announce", "rp_filter")


def rules_argv() -> list[str]:
    return ["ip", "-j", "rule", "show"]


def routes_argv() -> list[str]:
    return ["ip", "-j", "route", "show", "table", "all"]


def _json_list(tool: str, text: str) -> list[dict]:
    try:
        doc = json.loads(text or "[]")
    except json.JSONDecodeError as e:
        raise ParseError(tool, e.lineno, "a JSON array", text[:80]) from None
    if not isinstance(doc, list) or not all(isinstance(o, dict) for o in doc):
        raise ParseError(tool, 1, "a JSON array of objects", text[:80])
    return doc


@normalized
def parse_rules(text: str) -> list[tuple[int, str, str]]:
    """(priority, source as ``A`` or ``A/N``, table) per rule."""
    return [(int(o.get("priority", 0)), o.get("src", "all") + (f"/{o['srclen']}" if "srclen" in o else ""),
             str(o.get("table", ""))) for o in _json_list("ip -j rule", text)]


@normalized
def parse_routes(text: str) -> list[dict]:
    """The routes of every table, each with ``table`` (``main`` when iproute2 leaves it out)."""
    return [dict(o, table=str(o.get("table", "main"))) for o in _json_list("ip -j route", text)]


def conf_path(iface: str, key: str) -> str:
    return f"/proc/sys/net/ipv4/conf/{iface}/{key}"


def sysctl_set_argv(iface: str, key: str, value: int) -> list[str]:
    """``sysctl -w net/ipv4/conf/IF/KEY=V`` (slashes: an interface name may contain dots)."""
    return ["sysctl", "-w", f"net/ipv4/conf/{iface}/{key}={int(value)}"]


def rule_add_argv(src: str, table: int, priority: int) -> list[str]:
    return ["ip", "rule", "add", "from", src, "table", str(table), "priority", str(priority)]


def route_replace_argv(subnet: str, dev: str, src: str, table: int) -> list[str]:
    return ["ip", "route", "replace", subnet, "dev", dev, "src", src, "table", str(table)]
