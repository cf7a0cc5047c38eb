"""Policy routing of the mock host: ``ip [-j] rule show|add|del`` and ``ip [-j] route show table
all|N`` / ``ip route replace|del … table N`` (iproute2's JSON keys: ``priority``, ``src``,
``srclen`` only when not a host prefix, ``table``; routes ``dst``, ``dev``, ``protocol``,
``scope``, ``prefsrc``, ``table`` except for main). The main table's connected routes follow the
netdevs' addresses, as the kernel adds them."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field

_DEFAULT_RULES = [{"priority": 0, "src": "all", "table": "local"}, {"priority": 32766, "src": "all", "table": "main"},
                  {"priority": 32767, "src": "all", "table": "default"}]


@dataclass
class RouteState:
    rules: list[dict] = field(default_factory=lambda: [dict(r) for r in _DEFAULT_RULES])
    routes: list[dict] = field(default_factory=list)  # tables other than main/local


def state(cfg) -> RouteState:
    if "_routes" not in cfg.__dict__:
        cfg._routes = RouteState()
    return cfg._routes


def _opt(args: list[str], key: str) -> str | None:
    return args[args.index(key) + 1] if key in args and args.index(key) + 1 < len(args) else None


def ip(cfg, rest: list[str], json_out: bool, out, err) -> int:
    """``rest``: the words after ``ip`` and its options (``rule …`` / ``route …``)."""
    st = state(cfg)
    obj, verb = rest[0], (rest[1] if len(rest) > 1 else "show")
    if obj in ("rule", "ru"):
        if verb in ("show", "list", "ls"):
            rules = sorted(st.rules, key=lambda r: r["priority"])
            out(json.dumps(rules) + "\n" if json_out else
                "".join(f"{r['priority']}:\tfrom {r['src']}{'/' + str(r['srclen']) if 'srclen' in r else ''} "
                        f"lookup {r['table']}\n" for r in rules))
            return 0
        src, table, prio = _opt(rest, "from"), _opt(rest, "table") or _opt(rest, "lookup"), _opt(rest, "priority") \
            or _opt(rest, "pref")
        try:
            net = ipaddress.ip_network(src, strict=False) if src and src != "all" else None
        except ValueError:
            net = None
        if verb not in ("add", "del") or not table or (src != "all" and net is None) or (prio is not None and not prio.isdigit()):
            err('Error: argument is wrong\nUsage: ip rule { add | del } SELECTOR ACTION\n')
            return 255
        r = {"priority": int(prio) if prio else 32765, "src": "all" if net is None else str(net.network_address),
             "table": table}
        if net is not None and net.prefixlen != net.max_prefixlen:
            r["srclen"] = net.prefixlen
        same = [x for x in st.rules if all(x.get(k) == v for k, v in r.items()) and x.get("srclen") == r.get("srclen")]
        if verb == "add":
            if same:
                err("RTNETLINK answers: File exists\n")
                return 2
            st.rules.append(r)
            return 0
        if not same:
            err("RTNETLINK answers: No such file or directory\n")
            return 2
        st.rules.remove(same[0])
        return 0
    # route
    if verb in ("show", "list", "ls"):
        table = _opt(rest, "table") or "main"
        rows = [dict(r) for r in st.routes if table in ("all", r["table"])]
        if table in ("all", "main"):
            for nd, nds in cfg.netdevs.items():
                for a in nds.addresses:
                    i = ipaddress.ip_interface(a)
                    rows.append({"dst": str(i.network), "dev": nd, "protocol": "kernel", "scope": "link",
                                 "prefsrc": str(i.ip), "flags": []})
        out(json.dumps(rows) + "\n" if json_out else
            "".join(f"{r['dst']} dev {r['dev']}{' table ' + r['table'] if 'table' in r else ''} proto {r['protocol']} "
                    f"scope {r['scope']}{' src ' + r['prefsrc'] if 'prefsrc' in r else ''}\n" for r in rows))
        return 0
    dst, dev, table, src = (rest[2] if len(rest) > 2 else None), _opt(rest, "dev"), _opt(rest, "table"), _opt(rest, "src")
    try:
        net = ipaddress.ip_network(dst, strict=True) if dst else None
    except ValueError:
        net = None
    if verb not in ("replace", "add", "del") or net is None or not table or table in ("main", "local"):
        err("Error: any valid prefix is expected rather than \"%s\".\n" % dst if net is None else
            "mock ip route: only replace|add|del PREFIX dev IF [src A] table N (N not main/local) is modelled\n")
        return 1
    if dev is not None and dev not in cfg.netdevs:
        err(f'Cannot find device "{dev}"\n')
        return 1
    key = (str(net), table)
    old = [r for r in st.routes if (r["dst"], r["table"]) == key]
    if verb == "del":
        if not old:
            err("RTNETLINK answers: No such process\n")
            return 2
        st.routes.remove(old[0])
        return 0
    if verb == "add" and old:
        err("RTNETLINK answers: File exists\n")
        return 2
    for r in old:
        st.routes.remove(r)
    if src is not None and not any(a.split("/")[0] == src for nds in cfg.netdevs.values() for a in nds.addresses):
        err("Error: Invalid source address.\n")
        return 2
    r = {"dst": str(net), "dev": dev, "table": table, "protocol": "boot", "scope": "link", "flags": []}
    if src:
        r["prefsrc"] = src
    st.routes.append(r)
    return 0
