"""Plan step for the interrupts of each lane's port (:func:`plan_irq`): every MSI-X vector of the
port's PCI function (``/sys/class/net/IF/device/msi_irqs/``, one file per IRQ number) may run
only on the CPUs of the NIC's own NUMA node (``/sys/class/net/IF/device/numa_node``,
``device/local_cpulist``), written to ``/proc/irq/N/smp_affinity_list`` — the policy of
NVIDIA's ``set_irq_affinity_bynode.sh`` / ``mlnx_affinity`` (a whole node's CPU list here, one
write per port). irqbalance rewrites the affinities every 10 s, so with ``irq.irqbalance: stop``
it is stopped and disabled first (``systemctl disable --now irqbalance``); with ``report`` it is
left running and the plan says that it undoes the pinning.

Read by :func:`read_irq` in three commands per host: ``systemctl show`` of irqbalance, ``ls -1``
of every port's ``msi_irqs`` directory, then one ``grep -Hs .`` of the NUMA files and every
IRQ's affinity. Verified by reading the affinities back (the verify re-plan)."""

from __future__ import annotations

import re

from mfctl.errors import MfctlError, ParseError
from mfctl.provision.actions import Action, PlanContext
from mfctl.provision.steps.ports import host_netdevs, lane_ports, read_files

MORE_KEY = "irq"
UNIT = "irqbalance"
#: :attr:`Action.outcome` of irqbalance left running under ``irq.irqbalance: report`` (a finding)
OUTCOME_IRQBALANCE = "irqbalance undoes IRQ pinning"


def dev_path(netdev: str, name: str) -> str:
    return f"/sys/class/net/{netdev}/device/{name}"


def affinity_path(irq: int) -> str:
    return f"/proc/irq/{irq}/smp_affinity_list"


def expand_cpulist(text: str) -> set[int]:
    """``0-15,32-47`` → {0..15, 32..47} (the kernel's cpulist format). Raises ValueError."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def parse_ls_dirs(text: str) -> dict[str, list[int]]:
    """``ls -1 DIR…`` of several directories → ``{DIR: [IRQ numbers]}`` (``DIR:`` headers, one name
    a line, a blank line between). Raises ParseError on a name that is not a number."""
    out: dict[str, list[int]] = {}
    cur: str | None = None
    for k, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        if s.endswith(":") and s.startswith("/"):
            cur = s[:-1]
            out[cur] = []
        elif cur is not None and s.isdigit():
            out[cur].append(int(s))
        else:
            raise ParseError("ls -1 msi_irqs", k, "'DIR:' headers and IRQ numbers", s)
    return out


def tee_argv(cpulist: str, irqs: list[int]) -> list[str]:
    """``sh -c 'echo CPULIST | tee /proc/irq/N/smp_affinity_list … > /dev/null'``: one write of one CPU
    list to many IRQs, each failure named by tee (``tee: /proc/irq/N/smp_affinity_list: …``)."""
    if not re.fullmatch(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*", cpulist):
        raise ValueError(f"{cpulist!r} is not a CPU list")
    return ["sh", "-c", f"echo {cpulist} | tee {' '.join(affinity_path(int(i)) for i in irqs)} > /dev/null"]


def read_irq(pool, inv_host, act) -> dict:
    """``irqbalance``: (ActiveState, UnitFileState); ``irqs``: {netdev: [IRQ]}; ``files``: the
    NUMA node, local CPU list and every IRQ's affinity (``{path: value}``, missing files left out)."""
    h = inv_host.name
    nds = host_netdevs(inv_host, act)
    r = pool.run(h, ["systemctl", "show", "-p", "ActiveState,UnitFileState", UNIT])
    if r.error:
        raise MfctlError(f"{h}: systemctl show {UNIT}: {r.error}")
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line) if r.ok else {}
    out: dict = {"irqbalance": (kv.get("ActiveState", "unknown"), kv.get("UnitFileState", "")), "irqs": {}, "files": {}}
    if not nds:
        return out
    r = pool.run(h, ["ls", "-1", *[dev_path(nd, "msi_irqs") for nd in nds]])
    if r.error or r.rc not in (0, 1, 2):
        raise MfctlError(f"{h}: ls msi_irqs: {r.error or f'exit {r.rc}'}")
    text = r.stdout if len(nds) > 1 or not r.stdout.strip() else f"{dev_path(nds[0], 'msi_irqs')}:\n{r.stdout}"
    by_dir = parse_ls_dirs(text)
    out["irqs"] = {nd: sorted(by_dir[dev_path(nd, "msi_irqs")]) for nd in nds if dev_path(nd, "msi_irqs") in by_dir}
    paths = [dev_path(nd, f) for nd in nds for f in ("numa_node", "local_cpulist")]
    paths += [affinity_path(i) for irqs in out["irqs"].values() for i in irqs]
    out["files"] = read_files(pool, h, paths, "NUMA node, IRQ affinity")
    return out


def plan_irq(ctx: PlanContext) -> list[Action]:
    want = ctx.spec.irq
    if want.affinity == "off":
        return []
    more = ctx.act.more.get(MORE_KEY, {"irqbalance": ("inactive", ""), "irqs": {}, "files": {}})
    files, acts = more["files"], []
    pins = []
    for lp in lane_ports(ctx):
        nd = lp.netdev
        if lp.fresh:  # its IRQs are the driver's new ones after the reset: planned after it
            continue
        irqs = more["irqs"].get(nd)
        node, cpul = files.get(dev_path(nd, "numa_node")), files.get(dev_path(nd, "local_cpulist"))
        if not irqs or cpul is None:
            acts.append(Action("irq", nd, "IRQ affinity", "no msi_irqs / local_cpulist in sysfs", "", [],
                               manual=f"{nd}: sysfs shows no MSI-X IRQs or no local CPU list for the port's PCI function"))
            continue
        try:
            local = expand_cpulist(cpul)
        except ValueError as e:
            acts.append(Action("irq", nd, "IRQ affinity", str(e), "", [], manual=f"{nd}: unreadable local_cpulist: {e}"))
            continue
        bad = {}
        for i in irqs:
            cur = files.get(affinity_path(i))
            try:
                ok = cur is not None and expand_cpulist(cur) == local
            except ValueError:
                ok = False
            if not ok:
                bad[i] = cur
        if bad:
            shown = ", ".join(f"{i}: {bad[i] if bad[i] is not None else '?'}" for i in list(bad)[:4])
            more_n = f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
            where = f"node {node}" if node not in (None, "-1") else "the port's CPUs (no NUMA node)"
            pins.append(Action("irq", nd, "IRQ affinity", f"{len(bad)} of {len(irqs)} IRQs elsewhere ({shown}{more_n})",
                               f"{len(irqs)} IRQs on {where}: CPUs {cpul}", [tee_argv(cpul, sorted(bad))]))
    active, enabled = more["irqbalance"]
    if pins or active == "active":
        if active == "active" or enabled == "enabled":
            before = f"{UNIT} {active}, {enabled or 'not installed'}"
            if want.irqbalance == "stop":
                acts.append(Action("irq", UNIT, "irqbalance", before, "stopped and disabled (it would move the "
                                   "pinned IRQs again)", [["systemctl", "disable", "--now", UNIT]]))
            elif active == "active":
                acts.append(Action("irq", UNIT, "irqbalance", before, "it rewrites IRQ affinities every 10 s and will "
                                   "undo the pinning (irq.irqbalance: stop, or ban the NIC IRQs in its config)", [],
                                   outcome=OUTCOME_IRQBALANCE))
    return acts + pins
