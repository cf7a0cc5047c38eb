"""The ``ocs`` check: the OCS's standing alarms and its connected-but-dark output ports, over TL1.

Unlike the host checks it runs no SSH command: :func:`read_state` reads the switch once through
the OCS driver (``RTRV-CRS``, ``RTRV-ALM-ALL``, per-port power), :func:`judge` makes the OCS
target's findings from that state (a dict, so that a test or a run can give one of its own).
"""

from __future__ import annotations

import re

from mfctl.health.checks.base import fold_numbers
from mfctl.health.findings import Finding, HostHealth

NAME, GROUP = "ocs", "ocs"
RUNS = "TL1: cross-connects, RTRV-ALM-ALL, output power of connected ports"
JUDGES = "standing alarms; connected output ports with no light (critical)"


def read_state(ctx, name: str | None = None) -> dict:
    """``{"standing": [alarm lines], "dark_outputs": [ports]}`` of the OCS ``name`` (None: the
    only one), or ``{"error": why}`` when it cannot be reached or read (``ctx``:
    :class:`mfctl.context.Context`)."""
    from mfctl.errors import MfctlError

    try:
        with ctx.ocs(name=name) as drv:
            xc = drv.cross_connects()
            al = drv.alarms()
            power = drv.power(sorted(set(xc.values()))) if xc else {}
    except MfctlError as e:
        return {"error": str(e)}
    return {"standing": al["standing"], "dark_outputs": [p for p, v in power.items() if v is None]}


def read_states(ctx) -> dict[str, dict]:
    """:func:`read_state` of every OCS of the inventory, by name, read in parallel (each read is
    bounded by the context's connect and command timeouts)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [o.name for o in ctx.inventory.ocses]
    if len(names) == 1:
        return {names[0]: read_state(ctx, names[0])}
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="ocs-health") as ex:
        return dict(zip(names, ex.map(lambda n: read_state(ctx, n), names)))


def _alarms(host: str, standing: list) -> list[Finding]:
    """One finding per kind of standing alarm (severity, condition, description), its ports folded
    (``ports 397-768: MJ LOS — Loss of signal (372 ports)``: a dark half of the switch is one line,
    not 372); an alarm on a non-port AID (the shelf, a PSU) is its own."""
    from mfctl.ocs.service import parse_alarm

    groups: dict[tuple, list[tuple[int, object]]] = {}
    out: list[Finding] = []
    for a in standing:
        m = re.match(r'^\s*"?([^:\s"]+):', str(a))  # TL1: AID:NTFCNCDE,CONDTYPE,... (the AID is the port)
        if not m:
            out.append(Finding(host, "critical", GROUP, f"standing alarm {a}", "ocs.alarm", value=a, source=NAME))
            continue
        aid, f = m.group(1), parse_alarm(str(a).strip().strip('"'))
        what = f"{f['severity']} {f['condition']}" + (f" — {f['description']}" if f["description"] else "")
        if not (aid.isascii() and aid.isdigit()):
            out.append(Finding(host, "critical", GROUP, f"standing alarm {aid}: {what}", "ocs.alarm", component=aid,
                               value=a, source=NAME))
            continue
        groups.setdefault((what,), []).append((int(aid), a))
    for (what,), items in groups.items():
        items.sort(key=lambda x: x[0])
        ports = [p for p, _ in items]
        if len(items) == 1:
            out.append(Finding(host, "critical", GROUP, f"standing alarm port {ports[0]}: {what}", "ocs.alarm",
                               component=f"port{ports[0]}", value=items[0][1], source=NAME))
        else:
            r = fold_numbers(ports)
            out.append(Finding(host, "critical", GROUP, f"standing alarm ports {r}: {what} ({len(ports)} ports)",
                               "ocs.alarm", component=f"port[{r}]", value=[a for _, a in items], source=NAME))
    return out


def _dark(host: str, ports: list[int]) -> list[Finding]:
    """Connected output ports with no light: one finding (a port, or the ports folded)."""
    if len(ports) == 1:
        return [Finding(host, "critical", GROUP, f"output port {ports[0]} is connected but dark", "ocs.dark_port",
                        component=f"port{ports[0]}", value=ports[0], source=NAME)]
    if not ports:
        return []
    r = fold_numbers(sorted(ports))
    return [Finding(host, "critical", GROUP, f"output ports {r} are connected but dark ({len(ports)} ports)",
                    "ocs.dark_port", component=f"port[{r}]", value=sorted(ports), source=NAME)]


def judge_all(inv, states: dict) -> list[HostHealth]:
    """One target per OCS: ``states`` by OCS name (:func:`read_states`), or one OCS's state
    (:func:`read_state`) for the inventory's only one."""
    if "error" in states or "standing" in states or "dark_outputs" in states:
        return [judge(inv, states)]
    return [judge(inv, st, name) for name, st in states.items()]


def judge(inv, state: dict, name: str | None = None) -> HostHealth:
    """The target of the OCS ``name`` (None: the only one) of a sweep from its state
    (:func:`read_state`)."""
    name = name or inv.ocs.name
    hh = HostHealth(name, reachable=state.get("error") is None, kind="ocs")
    if state.get("error"):
        hh.findings.append(Finding(name, "critical", GROUP, state["error"], "ocs.unreachable", source=NAME))
    hh.findings += _alarms(name, state.get("standing", []))
    hh.findings += _dark(name, list(state.get("dark_outputs", [])))
    return hh
