"""The before/after gate of a test (sonic-mgmt's sanity check, for the mFabric testbed): the health
checks the test's marker selects (``mfctl health --checks`` syntax, :func:`mfctl.health.select_checks`)
on the hosts it names, and the OCS's cross-connects. A test that leaves a host with a critical
finding it did not have, or the OCS holding other cross-connects than it found, broke the testbed:
:func:`changes` names what changed."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("off", "before", "around")  #: --mfctl-health


@dataclass
class Snapshot:
    """The testbed as one gate saw it: critical findings ``(host, code, component) → message`` and the
    OCS's cross-connects (None: not read) — with several OCSes ``ocs`` is None and ``ocses`` holds
    each one's (``{name: {input: output}}``)."""

    critical: dict[tuple, str]
    ocs: dict[int, int] | None
    hosts: list[str]
    checks: list[str]
    ocses: dict[str, dict[int, int]] | None = None


def select(spec) -> list[str]:
    """The host checks a marker's ``health=`` selects (a ``--checks`` string, or a list of names): the
    default set without the OCS's own check (the gate reads the OCS's cross-connects itself)."""
    from mfctl.health import select_checks

    if isinstance(spec, (list, tuple)):
        spec = ",".join(spec)
    return [n for n in select_checks(spec or None) if n != "ocs"]


def take(session, checks: list[str], hosts: list[str], *, ocs: bool = True) -> Snapshot:
    """Sweep ``checks`` on ``hosts`` (none: no sweep) and read the OCS (``ocs``): every OCS of the
    testbed, in parallel when there are several."""
    from mfctl import health

    crit: dict[tuple, str] = {}
    if checks and hosts:
        rep = health.sweep(session.pool(), session.inventory, hosts, checks=checks)
        for f in rep.findings:
            if f.severity == "critical":
                crit[(f.host, f.code, f.component)] = f.message
    xc = by = None
    if ocs:
        names = [o.name for o in session.inventory.ocses]
        ctx = session.context()

        def read(name: str | None) -> dict[int, int]:
            with ctx.ocs(name=name) as drv:
                return drv.cross_connects()

        if len(names) == 1:
            xc = read(None)
        else:
            from mfctl.pytest_plugin.handles import _each

            by = _each(names, read)
    return Snapshot(crit, xc, hosts, checks, by)


def unhealthy(s: Snapshot) -> str | None:
    """What is critical in ``s`` (one line per finding), or None."""
    if not s.critical:
        return None
    return "; ".join(f"{h}: {m}" for (h, _, _), m in sorted(s.critical.items(), key=lambda kv: kv[0][:2]))


def changes(before: Snapshot, after: Snapshot, ports) -> list[str]:
    """What the test changed, for people: new critical findings per host, and the OCS's difference
    by lane (``ports``: :class:`mfctl.ocs.service.PortMap`; with several OCSes ``{name: PortMap}``,
    each OCS that differs named)."""
    from mfctl.pytest_plugin.handles import describe_change

    out = [f"{h} is unhealthy: {m} ({code})" for (h, code, comp), m in sorted(after.critical.items(), key=lambda kv: kv[0][:2])
           if (h, code, comp) not in before.critical]
    if before.ocs is not None and after.ocs is not None and before.ocs != after.ocs:
        out.append("the OCS differs from what the test found: " + describe_change(ports, before.ocs, after.ocs))
    if before.ocses is not None and after.ocses is not None:
        for name, was in before.ocses.items():
            now = after.ocses.get(name, {})
            if was != now:
                pm = ports[name] if isinstance(ports, dict) else ports
                out.append(f"the OCS {name} differs from what the test found: " + describe_change(pm, was, now))
    return out
