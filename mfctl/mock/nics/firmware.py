"""Firmware of the mock host's NICs: ``mlxconfig -e q`` / ``set`` (values pending until
``mlxfwreset``), ``mlxfwmanager --query`` / ``-u`` (a burnt image is active after
``mlxfwreset``), ``mlxfwreset`` and ``sha256sum`` of the virtual firmware images."""

from __future__ import annotations

import hashlib

from mfctl.mock.nics.state import NetdevState


def mock_image_sha256(image: str) -> str:
    """The mock firmware store's checksum of an image path (virtual images)."""
    return hashlib.sha256(f"mfctl mock firmware image {image.rsplit('/', 1)[-1]}".encode()).hexdigest()



def mlxconfig(cfg, args, out, err):
    if "-d" not in args:
        err("-E- Device not specified\n")
        return 1
    nic = cfg.nic_by_pci(args[args.index("-d") + 1])
    if nic is None:
        err(f"-E- Failed to open the device: {args[args.index('-d') + 1]}\n")
        return 1
    hdr = (f"\nDevice #1:\n----------\n\nDevice type:        ConnectX6DX         \nName:               {nic.part_number}\n"
           f"Description:        ConnectX-6 Dx EN adapter card; 100GbE; Dual-port QSFP56\nDevice:             {nic.pci}\n\n")
    if "q" in args:
        rows = "".join(f"{'*' if nic.mlx_current[k] != nic.mlx_next[k] else ' '}       {k:<44}{nic.mlx_current[k]:<20}"
                       f"{nic.mlx_current[k]:<20}{nic.mlx_next[k]}\n" for k in sorted(nic.mlx_current))
        out(hdr + f"Configurations:{'':<41}Default             Current             Next Boot\n" + rows)
        return 0
    if "set" in args:
        changes = [a.split("=", 1) for a in args[args.index("set") + 1:]]
        for k, _v in changes:
            if k not in nic.mlx_current:
                err(f"-E- The Device doesn't support {k} parameter\n")
                return 3
        rows = ""
        for k, v in changes:
            old = nic.mlx_next[k]
            label = old.split("(")[0] if "(" in old else None
            new = f"{label}({v})" if label and not v.startswith(label) else v
            if label and v in ("ETH", "IB", "VPI"):
                new = {"IB": "IB(1)", "ETH": "ETH(2)", "VPI": "VPI(3)"}[v]
            elif label == "True" or label == "False":
                new = "True(1)" if v in ("1", "True") else "False(0)"
            elif label in ("IB", "ETH", "VPI"):
                new = {"1": "IB(1)", "2": "ETH(2)", "3": "VPI(3)"}.get(v, new)
            rows += f"        {k:<44}{old:<21}{new}\n"
            nic.mlx_next[k] = new
        out(hdr + f"Configurations:{'':<42}Next Boot       New\n" + rows +
            "\n Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
            "-I- Please reboot machine to load new configurations.\n")
        return 0
    err("-E- unknown mlxconfig command\n")
    return 1


def mlxfwreset(cfg, args, out, err):
    nic = cfg.nic_by_pci(args[args.index("-d") + 1]) if "-d" in args else None
    if nic is None:
        err("-E- Device not found\n")
        return 1
    nic.mlx_current = dict(nic.mlx_next)
    split = int(nic.mlx_current.get("MODULE_SPLIT_M0", "1"))
    if split != nic.split:  # the module is re-split: its old netdevs go, new ones appear (MTU 1500, no address)
        for nd in nic.netdevs:
            cfg.netdevs.pop(nd, None)
        nic.split = split
        for nd in nic.netdevs:
            cfg.netdevs[nd] = NetdevState()
    if nic.fw_pending:
        nic.fw, nic.fw_pending = nic.fw_pending, None
    out("The reset level for device, " + nic.pci + " is:\n\n3: Driver restart and PCI reset\n"
        "-I- Sending Reset Command To Fw             -Done\n-I- Restarting MST                          -Done\n")
    return 0


def mlxfwmanager(cfg, args, out, err):
    if "--query" in args:
        txt = "Querying Mellanox devices firmware ...\n"
        for k, nic in enumerate(cfg.nics.values(), 1):
            txt += (f"\nDevice #{k}:\n----------\n\n  Device Type:      ConnectX6DX\n  Part Number:      {nic.part_number}\n"
                    f"  Description:      ConnectX-6 Dx EN adapter card; 100GbE\n  PSID:             {nic.psid}\n"
                    f"  PCI Device Name:  {nic.pci}\n  Base MAC:         b8cef6{k:06x}\n"
                    f"  Versions:         Current        Available     \n"
                    + (f"     FW             {nic.fw_pending:<15}N/A           \n     FW (Running)   {nic.fw:<15}N/A\n\n"
                       if nic.fw_pending else f"     FW             {nic.fw:<15}N/A           \n\n")
                    + f"  Status:           {'Up to date, reset needed' if nic.fw_pending else 'No matching image found'}\n")
        out(txt)
        return 0
    if "-u" in args and "-i" in args and "-d" in args:
        nic = cfg.nic_by_pci(args[args.index("-d") + 1])
        image = args[args.index("-i") + 1]
        if nic is None:
            err("-E- Device not found\n")
            return 1
        ver = image.rsplit("-", 1)[-1].removesuffix(".bin").replace("_", ".")
        if nic.psid not in image:
            err(f"-E- No matching image found for PSID {nic.psid} in {image}\n")
            return 1
        nic.fw_pending = ver
        out(f"Device #1:\n  PSID: {nic.psid}\n  Versions: Current {nic.fw} Available {ver}\n\n"
            "Perform FW update? [y/N]: y\nDevice #1: Updating FW ...     Done\n\n"
            "Restart needed for updates to take effect.\n")
        return 0
    err("-E- unsupported mlxfwmanager arguments\n")
    return 1


def sha256sum(cfg, args, out, err):
    if not args:
        err("sha256sum: missing operand\n")
        return 1
    image = args[-1]
    if not image.startswith("/opt/firmware/"):
        err(f"sha256sum: {image}: No such file or directory\n")
        return 1
    out(f"{mock_image_sha256(image)}  {image}\n")
    return 0
