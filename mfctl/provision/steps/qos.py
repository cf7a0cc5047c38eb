"""Plan step for RoCE QoS per port (:func:`plan_qos`): trust, the DSCP → priority map, PFC on the
RoCE priority only and ETS bandwidth, with ``mlnx_qos -i IF`` on every lane's netdev — a split
sub-port is its own port to mlnx_qos (the kernel's DCB ops are per netdev). The state is read by
:func:`read_qos` into ``HostActual.more["roce"]``."""

from __future__ import annotations

from mfctl.errors import MfctlError
from mfctl.hosts import rails as railtools
from mfctl.hosts import roce
from mfctl.provision.actions import Action, PlanContext
from mfctl.provision.steps.ports import host_netdevs, lane_ports, read_files

MORE_KEY = "roce"
#: a fresh mlx5 netdev's QoS (PCP trust, no PFC, the default DSCP map, TCs in vendor mode)
FRESH = roce.PortQos("pcp", [0] * 8, {}, [None] * 8, {})


def read_qos(pool, inv_host, act) -> dict:
    """Per netdev: ``qos`` (mlnx_qos), ``fec`` ((configured, active) or the error), and ``files`` (the
    ECN/CNP sysfs and the ARP/rp_filter sysctls of each netdev and of ``all``, ``grep -Hs``: a file
    that is missing is left out)."""
    h, nds = inv_host.name, host_netdevs(inv_host, act)
    out: dict = {"qos": {}, "fec": {}, "files": {}}
    for nd in nds:
        out["qos"][nd] = roce.parse_mlnx_qos(pool.run_checked(h, roce.mlnx_qos_argv(nd)))
        r = pool.run(h, roce.fec_show_argv(nd))
        try:
            out["fec"][nd] = roce.parse_fec(r.stdout) if r.ok else (r.error or (r.stderr or r.stdout).strip()[:200])
        except MfctlError as e:
            out["fec"][nd] = str(e)
    paths = [p for nd in nds for p in roce.ecn_paths(nd)]
    paths += [railtools.conf_path(i, k) for i in ["all", *nds] for k in railtools.SYSCTLS]
    out["files"] = read_files(pool, h, paths, "ECN/CNP sysfs, conf sysctls")
    return out


def plan_qos(ctx: PlanContext) -> list[Action]:
    """Each lane's port: trust, dscp2prio entries, PFC on the RoCE priority only, ETS ``tc_bw``."""
    spec, more = ctx.spec.roce, ctx.act.more.get(MORE_KEY, {"qos": {}})
    pfc = [1 if p == spec.pfc_priority else 0 for p in range(8)]
    acts = []
    for lp in lane_ports(ctx):
        q = FRESH if lp.fresh else more["qos"].get(lp.netdev)
        if q is None:
            continue  # the netdev is missing: the links step says so
        d2p = {d: p for d, p in {**spec.dscp2prio, spec.dscp: spec.priority_of(spec.dscp)}.items()
               if q.trust != "dscp" or q.dscp2prio.get(d, d >> 3) != p} if spec.trust == "dscp" else {}
        d2p = {d: p for d, p in d2p.items() if p != d >> 3 or q.dscp2prio.get(d, d >> 3) != p}
        bw = spec.tc_bw if spec.tc_bw is not None and q.tc_bw != spec.tc_bw else None
        if q.trust == spec.trust and q.pfc == pfc and not d2p and bw is None:
            continue
        before = f"trust {q.trust}, {_pfc(q.pfc)}" + (f", ETS {_bw(q.tc_bw)}" if spec.tc_bw else "")
        after = (f"trust {spec.trust}, {_pfc(pfc)}" + (f", ETS {_bw(spec.tc_bw)}" if spec.tc_bw else "")
                 + "".join(f", DSCP {d}→prio {p}" for d, p in sorted(d2p.items())))
        acts.append(Action("qos", lp.netdev, "RoCE QoS", before, after,
                           [roce.mlnx_qos_argv(lp.netdev, trust=spec.trust, pfc=pfc, dscp2prio=d2p, tc_bw=bw)]))
    return acts


def _pfc(v: list[int]) -> str:
    on = [str(p) for p, x in enumerate(v) if x]
    return f"PFC on prio {','.join(on)}" if on else "PFC off"


def _bw(v) -> str:
    return "vendor" if v is None or all(x is None for x in v) else "/".join("-" if x is None else str(x) for x in v)
