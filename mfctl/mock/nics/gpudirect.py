"""GPUDirect RDMA prerequisites of the mock host: ``lsmod`` / ``modprobe [-r] nvidia-peermem``,
``lspci -D -vvv`` (the PCIe switch downstream ports above each NIC with their ACS control,
the NICs' ``DevCtl … MaxReadReq``; pciutils' layout), ``setpci -s BDF ECAP_ACS+0x6.w=V`` /
``CAP_EXP+0x8.w=V:MASK``, and ``systemctl show|enable|disable nvidia-persistenced``.

Factory state: nvidia-peermem not loaded, ACS source validation + request/completion redirect
on (what server firmware enables by default, which sends GPU↔NIC peer traffic through the root
complex), the NICs' MaxReadReq 512 bytes, the persistence daemon disabled."""

from __future__ import annotations

from dataclasses import dataclass, field

PEERMEM = "nvidia_peermem"
UNIT = "nvidia-persistenced"
ACS_BITS = ["SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans"]
ACS_ON = 0x001d  # SrcValid | ReqRedir | CmpltRedir | UpstreamFwd (bits 0, 2, 3, 4)


@dataclass
class GDState:
    modules: set[str] = field(default_factory=lambda: {"nvidia", "mlx5_core", "mlx5_ib", "ib_core"})
    acs: dict[str, int] = field(default_factory=dict)  # downstream port BDF → ACS control word
    mrr: dict[str, int] = field(default_factory=dict)  # NIC BDF → MaxReadReq bytes
    unit_enabled: bool = False


def state(cfg) -> GDState:
    """The host's GPUDirect state (created on first use: factory or provisioned)."""
    if "_gpudirect" not in cfg.__dict__:
        prov = not getattr(cfg, "factory", True)
        st = GDState()
        for pci in cfg.nics:
            st.acs[bridge_of(pci)] = 0 if prov else ACS_ON
            st.mrr[pci] = 4096 if prov else 512
        if prov:
            st.modules.add(PEERMEM)
            st.unit_enabled = True
        cfg._gpudirect = st
    return cfg._gpudirect


def bridge_of(pci: str) -> str:
    """The PCIe switch downstream port above NIC ``pci`` (bus - 1, device 0)."""
    dom, bus, _ = pci.split(":")
    return f"{dom}:{int(bus, 16) - 1:02x}:00.0"


def lsmod(cfg, args, out, err):
    mods = sorted(state(cfg).modules)
    sizes = {"nvidia": 56487936, "mlx5_core": 2142208, "mlx5_ib": 479232, "ib_core": 454656, PEERMEM: 16384}
    out("Module                  Size  Used by\n" + "".join(f"{m:<24}{sizes.get(m, 16384):>8}  0\n" for m in mods))
    return 0


def modprobe(cfg, args, out, err):
    rm = "-r" in args
    names = [a.replace("-", "_") for a in args if not a.startswith("-")]
    if names != [PEERMEM]:
        err(f"modprobe: FATAL: Module {names[0] if names else ''} not found in directory /lib/modules/5.15.0-91-generic\n")
        return 1
    (state(cfg).modules.discard if rm else state(cfg).modules.add)(PEERMEM)
    return 0


def _dev_mrr(n: int) -> str:
    return f"MaxPayload 256 bytes, MaxReadReq {n} bytes"


def lspci(cfg, args, out, err):
    if "-vvv" not in args or "-D" not in args:
        err("mock lspci: only -D -vvv is modelled\n")
        return 1
    st, txt = state(cfg), ""
    for pci in cfg.nics:
        br = bridge_of(pci)
        ctl = st.acs.get(br, ACS_ON)
        txt += (f"{br} PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])\n"
                "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B- DisINTx+\n"
                "\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n"
                "\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+\n"
                "\t\t\tRlxdOrd- ExtTag+ PhantFunc- AuxPwr- NoSnoop-\n\t\t\t" + _dev_mrr(128) + "\n"
                "\tCapabilities: [148 v1] Access Control Services\n"
                "\t\tACSCap:\t" + " ".join(f"{b}+" for b in ACS_BITS) + "\n"
                "\t\tACSCtl:\t" + " ".join(f"{b}{'+' if ctl >> i & 1 else '-'}" for i, b in enumerate(ACS_BITS)) + "\n"
                "\tKernel driver in use: pcieport\n\n")
        txt += (f"{pci} Ethernet controller: Mellanox Technologies MT2892 Family [ConnectX-6 Dx]\n"
                "\tSubsystem: Mellanox Technologies Device 0016\n"
                "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+\n"
                "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
                "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s unlimited, L1 unlimited\n"
                "\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+\n"
                "\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-\n\t\t\t" + _dev_mrr(st.mrr.get(pci, 512)) + "\n"
                "\tKernel driver in use: mlx5_core\n\tKernel modules: mlx5_core\n\n")
    out(txt)
    return 0


def setpci(cfg, args, out, err):
    st = state(cfg)
    if len(args) != 3 or args[0] != "-s":
        err("setpci: usage: setpci -s BDF REG=VALUE[:MASK]\n")
        return 1
    bdf, (reg, _, val) = args[1], args[2].partition("=")
    bdf = bdf if bdf.count(":") == 2 else f"0000:{bdf}"
    v, _, mask = val.partition(":")
    try:
        vi, mi = int(v, 16), int(mask, 16) if mask else 0xffff
    except ValueError:
        err(f"setpci: Invalid value \"{val}\"\n")
        return 1
    if reg.upper() in ("ECAP_ACS+0X6.W", "ECAP_ACS+6.W", "ECAP0D+6.W") and bdf in st.acs:
        st.acs[bdf] = (st.acs[bdf] & ~mi) | (vi & mi)
        return 0
    if reg.upper() in ("CAP_EXP+0X8.W", "CAP_EXP+8.W") and bdf in st.mrr:
        cur = {128: 0, 256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[st.mrr[bdf]] << 12
        new = (cur & ~mi) | (vi & mi)
        st.mrr[bdf] = 128 << ((new >> 12) & 7)
        return 0
    err(f"setpci: Device {args[1]} not found or register {reg} not present\n")
    return 1


def systemctl(cfg, args, out, err):
    """``systemctl show -p ActiveState,UnitFileState UNIT``, ``enable|disable --now UNIT``, ``reboot``."""
    from mfctl.mock.nics import reboot

    if args == ["reboot"]:
        reboot.reboot(cfg)
        return 0
    from mfctl.mock.nics import tuning

    if (rc := tuning.systemctl(cfg, args, out, err)) is not None:  # irqbalance
        return rc
    st = state(cfg)
    if args[:1] == ["show"] and args[-1:] == [UNIT]:
        active = cfg.gpu_persistence and st.unit_enabled
        out(f"ActiveState={'active' if active else 'inactive'}\nUnitFileState={'enabled' if st.unit_enabled else 'disabled'}\n")
        return 0
    if args[:1] in (["enable"], ["disable"]) and "--now" in args and args[-1] == UNIT:
        st.unit_enabled = args[0] == "enable"
        cfg.gpu_persistence = st.unit_enabled  # the daemon enables persistence mode on every GPU; stopping it ends it
        verb = "Created symlink" if st.unit_enabled else "Removed"
        err(f"{verb} /etc/systemd/system/multi-user.target.wants/{UNIT}.service"
            + (f" \u2192 /lib/systemd/system/{UNIT}.service.\n" if st.unit_enabled else ".\n"))
        return 0
    err(f"Failed to {args[0] if args else 'run'}: mock systemctl models only {UNIT} and reboot\n")
    return 1
