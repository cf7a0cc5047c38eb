"""The ``ocs`` check: the OCS's standing alarms and its connected-but-dark output ports, over TL1.

Unlike the host checks it runs no SSH command: :func:`read_state` reads the switch once through
the OCS driver (``RTRV-CRS``, ``RTRV-ALM-ALL``, per-port power), :func:`judge` makes the OCS
target's findings from that state (a dict, so that a test or a run can give one of its own).
"""

from __future__ import annotations

import re

from mfctl.health.findings import Finding, HostHealth

NAME, GROUP = "ocs", "ocs"
RUNS = "TL1: cross-connects, RTRV-ALM-ALL, output power of connected ports"
JUDGES = "standing alarms; connected output ports with no light (critical)"


def read_state(ctx) -> dict:
    """``{"standing": [alarm lines], "dark_outputs": [ports]}``, or ``{"error": why}`` when the OCS
    cannot be reached or read (``ctx``: :class:`mfctl.context.Context`)."""
    from mfctl.errors import MfctlError

    try:
        with ctx.ocs() as drv:
            xc = drv.cross_connects()
            al = drv.alarms()
            power = drv.power(sorted(set(xc.values()))) if xc else {}
    except MfctlError as e:
        return {"error": str(e)}
    return {"standing": al["standing"], "dark_outputs": [p for p, v in power.items() if v is None]}


def _alarm(host: str, a) -> Finding:
    m = re.match(r'^\s*"?([^:\s"]+):', str(a))  # TL1: AID:NTFCNCDE,CONDTYPE,... (the AID is the port)
    aid, text = None, str(a)
    if m:
        from mfctl.ocs.service import parse_alarm

        aid = m.group(1)
        f = parse_alarm(str(a).strip().strip('"'))
        text = (f"{'port ' if aid.isdigit() else ''}{aid}: {f['severity']} {f['condition']}"
                + (f" — {f['description']}" if f["description"] else ""))
    return Finding(host, "critical", GROUP, f"standing alarm {text}", "ocs.alarm",
                   component=f"port{aid}" if aid and aid.isdigit() else aid, value=a, source=NAME)


def judge(inv, state: dict) -> HostHealth:
    """The OCS target of a sweep from its state (:func:`read_state`)."""
    name = inv.ocs.name
    hh = HostHealth(name, reachable=state.get("error") is None, kind="ocs")
    if state.get("error"):
        hh.findings.append(Finding(name, "critical", GROUP, state["error"], "ocs.unreachable", source=NAME))
    hh.findings += [_alarm(name, a) for a in state.get("standing", [])]
    hh.findings += [Finding(name, "critical", GROUP, f"output port {p} is connected but dark", "ocs.dark_port",
                            component=f"port{p}", value=p, source=NAME) for p in state.get("dark_outputs", [])]
    return hh
