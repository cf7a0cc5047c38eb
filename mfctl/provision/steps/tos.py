"""Plan step for the traffic class RDMA traffic leaves each lane's RDMA port with
(:func:`plan_tos`), so that traffic which sets none lands on the lossless priority too:

- the **RDMA-CM default ToS** (``roce.cma_tos``): configfs
  ``/sys/kernel/config/rdma_cm/IBDEV/ports/1/default_roce_tos``, a 0..255 number that RDMA-CM QPs
  get unless the application calls ``rdma_set_option(RDMA_OPTION_ID_TOS)`` (kernel
  Documentation/ABI/testing/configfs-rdma_cm, Linux 4.11). The ``IBDEV`` directory exists only
  once it is made (``mkdir``; NVIDIA's ``cma_roce_tos -d IBDEV -t TOS`` does the mkdir and the
  write); the value reads back as the bare number;
- MLNX_OFED's **global traffic class** (``roce.traffic_class``):
  ``/sys/class/infiniband/IBDEV/tc/1/traffic_class`` (mlx5_ib of MLNX_OFED/DOCA-OFED; the upstream
  driver has no ``tc/`` directory): written as a bare number (or ``tclass=N``; ``tclass=-1``
  clears it), read back as ``Global tclass=N`` — an empty file when unset. It overrides the
  traffic class of every QP of the port, NCCL's ``NCCL_IB_TC`` included.

``IBDEV`` is each lane's RDMA device as ``ibdev2netdev`` maps it (``mlx5_0 port 1 ==> ens1f0np0
(Up)``), read with the files in :func:`read_tos` (``head -v -n 1 PATH…``: every file that exists
gets a ``==> PATH <==`` header, an unset traffic class an empty body). The recipe checks each
value's DSCP against ``roce.dscp`` (:class:`mfctl.provision.models.RoCE`)."""

from __future__ import annotations

import re

from mfctl.errors import MfctlError, ParseError
from mfctl.hosts import rdma
from mfctl.hosts import roce as roce_tools
from mfctl.provision.actions import OUTCOME_UNSUPPORTED, Action, PlanContext
from mfctl.provision.steps.ports import host_netdevs, lane_ports

MORE_KEY = "tos"
CONFIGFS = "/sys/kernel/config/rdma_cm"


def tc_path(ibdev: str, port: int = 1) -> str:
    return f"/sys/class/infiniband/{ibdev}/tc/{port}/traffic_class"


def cma_dir(ibdev: str) -> str:
    return f"{CONFIGFS}/{ibdev}"


def cma_path(ibdev: str, port: int = 1) -> str:
    return f"{cma_dir(ibdev)}/ports/{port}/default_roce_tos"


def head_argv(paths: list[str]) -> list[str]:
    """``head -v -n 1 PATH…``: a ``==> PATH <==`` header and the first line of every file that
    exists (an empty file: an empty body); a missing file is a message on stderr (exit 1)."""
    return ["head", "-v", "-n", "1", *paths]


def parse_head(text: str) -> dict[str, str]:
    """``head -v`` output → ``{path: first line}`` ("" for an empty file). Raises ParseError on
    text before the first header."""
    out: dict[str, str] = {}
    cur: str | None = None
    for k, raw in enumerate(text.splitlines(), 1):
        if m := re.fullmatch(r"==> (.+) <==", raw):
            cur = m[1]
            out[cur] = ""
        elif cur is None and raw.strip():
            raise ParseError("head -v", k, "'==> PATH <=='", raw)
        elif cur is not None and raw.strip() and not out[cur]:
            out[cur] = raw.strip()
    return out


def parse_traffic_class(text: str | None) -> int | None:
    """``Global tclass=106`` → 106; "" (unset) → -1; None (no such file) → None. Raises ParseError
    on anything else (a per-destination rule such as ``dst_ip=…,tclass=…`` has no global value: -1)."""
    if text is None:
        return None
    s = text.strip()
    if not s:
        return -1
    if m := re.fullmatch(r"Global tclass=(\d+)", s):
        return int(m[1])
    if "tclass=" in s:  # rules only (src_ip=/dst_ip=…): no global traffic class set
        return -1
    raise ParseError("traffic_class", 1, "'Global tclass=N' or nothing", s[:80])


def read_tos(pool, inv_host, act) -> dict:
    """``ibdev``: {netdev: (ibdev, port)} from ``ibdev2netdev``; ``files``: what ``head -v``
    returned for each lane's traffic_class and default_roce_tos, and whether ``CONFIGFS`` exists
    (``{path: first line}``, a missing file left out): two commands per host; ``error`` when the
    host has no RDMA device at all."""
    h = inv_host.name
    nds = host_netdevs(inv_host, act)
    if not nds:
        return {"ibdev": {}, "files": {}}
    r = pool.run(h, ["ibdev2netdev"])
    if r.error:
        raise MfctlError(f"{h}: ibdev2netdev: {r.error}")
    if not r.ok:  # no RDMA devices at all (no driver loaded): every lane is "not supported"
        return {"ibdev": {}, "files": {}, "error": (r.stderr or r.stdout).strip()[:200] or f"exit {r.rc}"}
    m = rdma.parse_ibdev2netdev(r.stdout) if r.stdout.strip() else {}
    ib = {nd: (dev, port) for dev, (port, nd, _up) in m.items() if nd in nds}
    paths = [CONFIGFS] + [p for dev, port in ib.values() for p in (tc_path(dev, port), cma_path(dev, port))]
    r = pool.run(h, head_argv(paths))
    if r.error:
        raise MfctlError(f"{h}: head -v (traffic_class, rdma_cm configfs): {r.error}")
    return {"ibdev": ib, "files": parse_head(r.stdout)}


def plan_tos(ctx: PlanContext) -> list[Action]:
    spec = ctx.spec.roce
    if spec.cma_tos is None and spec.traffic_class is None:
        return []
    more = ctx.act.more.get(MORE_KEY, {"ibdev": {}, "files": {}})
    files, acts = more["files"], []
    for lp in lane_ports(ctx):
        nd = lp.netdev
        hit = more["ibdev"].get(nd)
        if lp.fresh:  # re-split pending: planned again after the reset, when its RDMA device exists
            continue
        if hit is None:
            why = more.get("error") or "ibdev2netdev maps no RDMA device to it"
            acts.append(Action("roce", nd, "RDMA traffic class", f"no RDMA device ({why})", "", [],
                               outcome=OUTCOME_UNSUPPORTED))
            continue
        dev, port = hit
        if spec.traffic_class is not None:
            path = tc_path(dev, port)
            try:
                have = parse_traffic_class(files.get(path))
            except ParseError as e:
                have, odd = -2, str(e)
            if have is None:
                acts.append(Action("roce", f"{nd} ({dev})", "verbs traffic class", f"no {path} (the driver is not "
                                   "MLNX_OFED's/DOCA-OFED's)", str(spec.traffic_class), [], outcome=OUTCOME_UNSUPPORTED))
            elif have != spec.traffic_class:
                before = "unset" if have == -1 else odd if have == -2 else f"Global tclass={have}"
                acts.append(Action("roce", f"{nd} ({dev})", "verbs traffic class", before,
                                   f"Global tclass={spec.traffic_class} (DSCP {spec.traffic_class >> 2})",
                                   [roce_tools.write_argv(path, spec.traffic_class)]))
        if spec.cma_tos is not None:
            path = cma_path(dev, port)
            cur = files.get(path)
            if CONFIGFS not in files:
                acts.append(Action("roce", f"{nd} ({dev})", "RDMA-CM default ToS", f"no {CONFIGFS} (configfs not "
                                   "mounted or rdma_cm not loaded)", str(spec.cma_tos), [],
                                   manual="mount configfs on /sys/kernel/config and load rdma_cm, then re-run"))
            elif cur is None or cur != str(spec.cma_tos):
                argvs = ([] if cur is not None else [["mkdir", "-p", cma_dir(dev)]]) + [roce_tools.write_argv(path, spec.cma_tos)]
                acts.append(Action("roce", f"{nd} ({dev})", "RDMA-CM default ToS",
                                   "no configfs entry" if cur is None else cur, f"{spec.cma_tos} (DSCP {spec.cma_tos >> 2})",
                                   argvs))
    return acts
