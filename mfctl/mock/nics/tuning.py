"""The mock host's RDMA traffic-class files, NUMA/IRQ sysfs and irqbalance, answered as the kernel
and the tools answer them:

- ``/sys/class/infiniband/IBDEV/tc/1/traffic_class`` (MLNX_OFED mlx5_ib): empty while unset, else
  ``Global tclass=N``; takes ``N`` or ``tclass=N`` (0..255; ``tclass=-1`` clears), anything else
  ``Invalid argument``. Kept per netdev (a driver restart or reboot loses it);
- configfs ``/sys/kernel/config/rdma_cm/IBDEV/ports/1/default_roce_tos`` (kernel ABI
  configfs-rdma_cm): exists once ``mkdir /sys/kernel/config/rdma_cm/IBDEV`` made the device's
  directory (``No such device`` for a name that is no RDMA device), reads ``0`` by default, takes
  0..255. The directory lives until a reboot; the value is the RDMA device's (a driver restart
  resets it to 0 — to be confirmed on hardware);
- ``/sys/class/net/IF/device/numa_node`` / ``local_cpulist`` / ``msi_irqs/`` (a directory, one entry
  per MSI-X vector: 8 completion vectors and an async one per PCI function) and
  ``/proc/irq/N/smp_affinity_list``: 64 CPUs on two nodes (node 0: ``0-15,32-47``, node 1:
  ``16-31,48-63``; a NIC on PCI bus 0x80 or above is on node 1). irqbalance, while active, moves an
  IRQ written more than :data:`IRQBALANCE_S` testbed seconds ago back to its own choice (one CPU,
  anywhere);
- ``head -v -n 1 PATH…``, ``ls -1 DIR…``, ``mkdir -p DIR``, ``sh -c 'echo V | tee PATH… > /dev/null'``
  (GNU coreutils' layouts and messages), ``systemctl show|disable --now irqbalance``."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

NCPUS = 64
NODE_CPUS = {0: "0-15,32-47", 1: "16-31,48-63"}
IRQS_PER_PORT = 9  # 8 completion vectors + the async/command one
IRQBALANCE_S = 10.0  #: irqbalance's rebalancing interval (testbed seconds)

_TC = re.compile(r"^/sys/class/infiniband/([^/]+)/tc/1/traffic_class$")
_CMA_DIR = re.compile(r"^/sys/kernel/config/rdma_cm/([^/]+)$")
_CMA = re.compile(r"^/sys/kernel/config/rdma_cm/([^/]+)/ports/1/default_roce_tos$")
_DEV = re.compile(r"^/sys/class/net/([^/]+)/device/(numa_node|local_cpulist|msi_irqs)$")
_AFF = re.compile(r"^/proc/irq/(\d+)/smp_affinity_list$")
CONFIGFS = "/sys/kernel/config/rdma_cm"


@dataclass
class HostTuning:
    """Host-wide: the rdma_cm configfs directories made, irqbalance's unit state."""

    cma_dirs: set[str] = field(default_factory=set)
    irqbalance_active: bool = True
    irqbalance_enabled: bool = True


def state(cfg) -> HostTuning:
    if "_tuning" not in cfg.__dict__:
        st = HostTuning()
        if not cfg.factory:  # a provisioned host: irqbalance off, every RDMA device's configfs directory made
            st.irqbalance_active = st.irqbalance_enabled = False
            st.cma_dirs = {dev for dev, _nd in ibdevs(cfg)}
        cfg._tuning = st
    return cfg._tuning


def ibdevs(cfg) -> list[tuple[str, str]]:
    """(RDMA device, netdev) as :mod:`mfctl.mock.rdmatools` numbers them (``mlx5_k`` in netdev order)."""
    return [(f"mlx5_{k}", nd) for k, nd in enumerate(cfg.current_netdevs())]


def _netdev_of(cfg, ibdev: str) -> str | None:
    return dict(ibdevs(cfg)).get(ibdev)


def _port(cfg, nd: str | None):
    from mfctl.mock.nics.qos import port

    return port(cfg, nd) if nd else None


def nic_of(cfg, nd: str):
    return next((n for n in cfg.nics.values() if nd in n.netdevs), None)


def numa_node(nic) -> int:
    return 1 if int(nic.pci.split(":")[1], 16) >= 0x80 else 0


def irqs_of(cfg, nd: str) -> list[int]:
    """The MSI-X IRQ numbers of netdev ``nd``'s PCI function (by its place among the host's netdevs)."""
    names = cfg.current_netdevs()
    if nd not in names:
        return []
    base = 64 + 16 * names.index(nd)
    return list(range(base, base + IRQS_PER_PORT))


def _irq_owner(cfg, irq: int) -> str | None:
    return next((nd for nd in cfg.current_netdevs() if irq in irqs_of(cfg, nd)), None)


def _scale(cfg) -> float:
    tb = getattr(cfg.host, "testbed", None)
    return getattr(tb, "time_scale", 1.0) or 1.0


def affinity(cfg, irq: int) -> str | None:
    nd = _irq_owner(cfg, irq)
    st = _port(cfg, nd)
    if nd is None or st is None:
        return None
    balanced = str((irq * 7) % NCPUS)  # irqbalance's choice: one CPU, either node
    nic = nic_of(cfg, nd)
    first = NODE_CPUS[numa_node(nic)] if st.irq_pinned and nic else balanced
    val, t = st.irq_aff.get(irq, (first, float("-inf")))
    if state(cfg).irqbalance_active and time.monotonic() - t >= IRQBALANCE_S / _scale(cfg):
        return balanced  # its pass since the last write moved the IRQ to its own choice
    return val


def read(cfg, path: str) -> str | None:
    """The file's content (no newline; "" for an empty file), or None when it does not exist."""
    if m := _TC.match(path):
        st = _port(cfg, _netdev_of(cfg, m[1]))
        return None if st is None else ("" if st.tclass < 0 else f"Global tclass={st.tclass}")
    if m := _CMA.match(path):
        st = _port(cfg, _netdev_of(cfg, m[1]))
        return None if st is None or m[1] not in state(cfg).cma_dirs else str(st.cma_tos)
    if m := _DEV.match(path):
        nic = nic_of(cfg, m[1])
        if nic is None or m[2] == "msi_irqs":
            return None
        return str(numa_node(nic)) if m[2] == "numa_node" else NODE_CPUS[numa_node(nic)]
    if m := _AFF.match(path):
        return affinity(cfg, int(m[1]))
    return None


def handles(path: str) -> bool:
    return any(r.match(path) for r in (_TC, _CMA, _DEV, _AFF))


def write(cfg, path: str, value: str) -> str | None:
    """Write ``value``; the error (as sh/tee say it after the path) or None."""
    if read(cfg, path) is None:
        return "No such file or directory"
    if m := _TC.match(path):
        v = value.removeprefix("tclass=")
        if not re.fullmatch(r"-?\d+", v) or int(v) > 255 or (int(v) < 0 and not value.startswith("tclass=")):
            return "Invalid argument"
        st = _port(cfg, _netdev_of(cfg, m[1]))
        st.tclass = max(int(v), -1)
        return None
    if m := _CMA.match(path):
        if not value.isdigit() or int(value) > 255:
            return "Invalid argument"
        _port(cfg, _netdev_of(cfg, m[1])).cma_tos = int(value)
        return None
    if m := _AFF.match(path):
        nd = _irq_owner(cfg, int(m[1]))
        try:
            cpus = _expand(value)
        except ValueError:
            return "Invalid argument"
        if not cpus or max(cpus) >= NCPUS:
            return "Invalid argument"
        _port(cfg, nd).irq_aff[int(m[1])] = (value, time.monotonic())
        return None
    return "Permission denied"  # numa_node, local_cpulist: read-only


def _expand(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(text)
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def head(cfg, args, out, err):
    """``head -v -n 1 PATH…`` over the files above (others: not modelled, exit 1)."""
    if args[:3] != ["-v", "-n", "1"] or len(args) < 4:
        return None
    rc, first = 0, True
    for p in args[3:]:
        v = read(cfg, p) if handles(p) else None
        if p == CONFIGFS:
            err(f"head: error reading '{p}': Is a directory\n")
            out(("" if first else "\n") + f"==> {p} <==\n")
            first = False
            rc = 1
            continue
        if v is None:
            err(f"head: cannot open '{p}' for reading: No such file or directory\n")
            rc = 1
            continue
        out(("" if first else "\n") + f"==> {p} <==\n" + (v + "\n" if v else ""))
        first = False
    return rc


def ls(cfg, args, out, err):
    """``ls -1 DIR…`` of ``/sys/class/net/IF/device/msi_irqs`` directories (sorted operands, ``DIR:``
    headers when there are several, names in ``ls``'s order)."""
    if args[:1] != ["-1"] or len(args) < 2:
        return None
    dirs = sorted(args[1:])
    rc, blocks = 0, []
    for d in dirs:
        m = _DEV.match(d)
        irqs = irqs_of(cfg, m[1]) if m and m[2] == "msi_irqs" else []
        if not irqs:
            err(f"ls: cannot access '{d}': No such file or directory\n")
            rc = 2
            continue
        names = sorted(str(i) for i in irqs)
        blocks.append((f"{d}:\n" if len(dirs) > 1 else "") + "".join(n + "\n" for n in names))
    out("\n".join(blocks))
    return rc


def mkdir(cfg, args, out, err):
    """``mkdir -p /sys/kernel/config/rdma_cm/IBDEV``: the RDMA device's configfs group."""
    m = _CMA_DIR.match(args[-1]) if args[:1] == ["-p"] and len(args) == 2 else None
    if m is None:
        return None
    if _netdev_of(cfg, m[1]) is None:
        err(f"mkdir: cannot create directory '{args[-1]}': No such device\n")
        return 1
    state(cfg).cma_dirs.add(m[1])
    return 0


def tee(cfg, value: str, paths: list[str], err) -> int:
    """``echo V | tee PATH… > /dev/null``: every path written, each failure named (exit 1)."""
    rc = 0
    for p in paths:
        e = write(cfg, p, value) if handles(p) else "No such file or directory"
        if e:
            err(f"tee: {p}: {e}\n")
            rc = 1
    return rc


def systemctl(cfg, args, out, err):
    """``systemctl show -p ActiveState,UnitFileState irqbalance``, ``disable|enable --now irqbalance``
    (another unit: None)."""
    if args[-1:] != ["irqbalance"]:
        return None
    st = state(cfg)
    if args[:1] == ["show"] and args[-1:] == ["irqbalance"]:
        out(f"ActiveState={'active' if st.irqbalance_active else 'inactive'}\n"
            f"UnitFileState={'enabled' if st.irqbalance_enabled else 'disabled'}\n")
        return 0
    if args[:1] in (["enable"], ["disable"]) and "--now" in args and args[-1] == "irqbalance":
        st.irqbalance_active = st.irqbalance_enabled = args[0] == "enable"
        err("Removed /etc/systemd/system/multi-user.target.wants/irqbalance.service.\n" if args[0] == "disable" else
            "Created symlink /etc/systemd/system/multi-user.target.wants/irqbalance.service \u2192 "
            "/lib/systemd/system/irqbalance.service.\n")
        return 0
    return None


def reboot(cfg) -> None:
    """What a reboot does here: configfs is empty again; irqbalance runs again if it is enabled."""
    st = state(cfg)
    st.cma_dirs = set()
    st.irqbalance_active = st.irqbalance_enabled
