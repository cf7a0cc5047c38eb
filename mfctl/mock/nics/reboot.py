"""A reboot of the mock host (``systemctl reboot``, or :func:`reboot` from a test): what survives
is what a real host keeps — NIC firmware and its non-volatile configuration (pending mlxconfig
values and a burnt image become active), MIG mode (a pending change takes effect: the reboot is
the GPU reset), enabled systemd units (the persistence daemon starts again). Everything set at
runtime is lost: each netdev comes back fresh (MTU 1500, no address, default QoS, ECN, sysctls
and FEC), policy rules and routes, ``net.ipv4.conf.all.*``, loaded modules (nvidia-peermem),
``setpci`` writes (ACS, MaxReadReq) and legacy ``nvidia-smi -pm 1``."""

from __future__ import annotations


def reboot(cfg) -> None:
    from mfctl.mock.nics import firmware, gpudirect, tuning

    tuning.reboot(cfg)  # configfs empty again, irqbalance back if enabled
    enabled = gpudirect.state(cfg).unit_enabled
    for nic in cfg.nics.values():  # what a level-3 reset does, and more: every NIC at once
        firmware._restart_driver(cfg, nic)
    for k in ("_sysctl", "_routes"):
        cfg.__dict__.pop(k, None)
    fresh = gpudirect.GDState(unit_enabled=enabled)
    for pci in cfg.nics:
        fresh.acs[gpudirect.bridge_of(pci)] = gpudirect.ACS_ON
        fresh.mrr[pci] = 512
    cfg._gpudirect = fresh
    cfg.gpu_persistence = enabled
    cfg.gpu_mig = getattr(cfg, "gpu_mig_pending", cfg.gpu_mig)
