"""Plan step for several RoCE ports of one host in one subnet (:func:`plan_rails`), e.g. the
sub-ports of a breakout with ``198.18.0.1/24`` and ``198.18.0.2/24``: per interface
``arp_ignore`` / ``arp_announce`` / loose ``rp_filter`` (kernel ip-sysctl.rst; the kernel uses
max(conf/all, conf/IF), so a higher ``all`` is planned down too) and source routing per rail —
``ip rule add from ADDR table N`` + ``ip route replace SUBNET dev IF src ADDR table N`` — as
multi-rail RoCE guides do, or the kernel answers ARP and sends from whichever port it likes.
Lanes alone in their subnet need none of it. Read by :func:`read_rails` into
``HostActual.more["rails"]`` (the sysctls come with :func:`mfctl.provision.steps.qos.read_qos`)."""

from __future__ import annotations

import ipaddress

from mfctl.hosts import rails
from mfctl.provision.actions import Action, PlanContext
from mfctl.provision.steps import qos
from mfctl.provision.steps.ports import LanePort, lane_ports

MORE_KEY = "rails"


def read_rails(pool, inv_host, act) -> dict:
    """``rules``: [(priority, src, table)], ``routes``: every table's routes (iproute2 JSON)."""
    h = inv_host.name
    return {"rules": rails.parse_rules(pool.run_checked(h, rails.rules_argv())),
            "routes": rails.parse_routes(pool.run_checked(h, rails.routes_argv()))}


def shared_subnet_lanes(ctx: PlanContext) -> list[tuple[LanePort, str, ipaddress.IPv4Interface | ipaddress.IPv6Interface]]:
    """(lane port, netdev, address) of every lane that shares its subnet with another lane of the host, in lane order."""
    lanes = []
    for lp in lane_ports(ctx):
        a = ctx.spec.address_for(ctx.hi + 1, lp.ni, lp.lane.index)
        if a:
            lanes.append((lp, lp.netdev, ipaddress.ip_interface(a)))
    nets = [i.network for _, _, i in lanes]
    return [x for x in lanes if nets.count(x[2].network) > 1]


def plan_rails(ctx: PlanContext) -> list[Action]:
    want, more = ctx.spec.rails, ctx.act.more.get(MORE_KEY, {"rules": [], "routes": []})
    files = ctx.act.more.get(qos.MORE_KEY, {}).get("files", {})
    acts: list[Action] = []
    shared = shared_subnet_lanes(ctx)
    if not shared:
        return acts
    levels = {"arp_ignore": want.arp_ignore, "arp_announce": want.arp_announce, "rp_filter": want.rp_filter}
    for key, v in levels.items():  # conf/all above the wanted value wins over every interface
        cur = files.get(rails.conf_path("all", key))
        if cur is not None and int(cur) > v:
            acts.append(Action("rails", "all interfaces", key, f"all={cur}", f"all={v}", [rails.sysctl_set_argv("all", key, v)]))
    for k, (lp, nd, ifc) in enumerate(shared):
        cur = {key: ("0" if lp.fresh else files.get(rails.conf_path(nd, key))) for key in levels}
        diff = {key: v for key, v in levels.items() if cur[key] != str(v)}
        if diff:
            acts.append(Action("rails", nd, "ARP/rp_filter", ", ".join(f"{key}={cur[key]}" for key in diff),
                               ", ".join(f"{key}={v}" for key, v in diff.items()),
                               [rails.sysctl_set_argv(nd, key, v) for key, v in diff.items()]))
        table, prio, ip = want.table_base + k + 1, want.rule_priority + k, str(ifc.ip)
        if not any(r == (prio, ip, str(table)) for r in more["rules"]):
            acts.append(Action("rails", nd, "source rule", _rules_from(more["rules"], ip), f"{prio}: from {ip} lookup {table}",
                               [rails.rule_add_argv(ip, table, prio)]))
        subnet = str(ifc.network)
        have = [r for r in more["routes"] if r.get("table") == str(table) and r.get("dst") == subnet]
        if not any(r.get("dev") == nd and r.get("prefsrc") == ip for r in have):
            before = ", ".join(f"dev {r.get('dev')} src {r.get('prefsrc')}" for r in have) or "none"
            acts.append(Action("rails", nd, f"route in table {table}", before, f"{subnet} dev {nd} src {ip}",
                               [rails.route_replace_argv(subnet, nd, ip, table)]))
    return acts


def _rules_from(rules: list[tuple[int, str, str]], ip: str) -> str:
    mine = [f"{p}: from {s} lookup {t}" for p, s, t in rules if s == ip]
    return ", ".join(mine) or "none"
