"""Firmware of the mock host's NICs: ``mlxconfig -e q`` / ``set`` (values pending until
``mlxfwreset``; a value outside the parameter's range and a parameter the card does not expose are
refused), ``mlxfwmanager --query`` / ``-u`` (a burn takes :data:`BURN_S` scaled by the mock's time
scale; an image of another PSID is refused; an image that is not newer is skipped unless
``--force``; a burnt image is active after ``mlxfwreset``), ``mlxfwreset query`` / ``reset``
(the card's supported levels; level 3 restarts the driver: every netdev of the NIC comes back
fresh — MTU 1500, no address, default QoS) and ``sha256sum`` of the virtual firmware images.

Cards (:data:`FW_CARDS`, by the inventory's NIC ``model``) differ in what their firmware exposes:
the Ethernet-only ConnectX-4 Lx has no ``LINK_TYPE_P1`` (as openshift/sriov-network-operator issue
#48's ``mstconfig q`` shows), a Dell OEM ConnectX-6 Dx carries PSID ``DEL0000000027`` (Dell
community report), and the mock-only "ConnectX-6 Dx (no PCI reset)" reports reset level 3 *Not
Supported* (mstflint prints that when the driver supports no reset sync) so only a reboot loads
its firmware.
"""

from __future__ import annotations

import hashlib
import re
import time

from mfctl.mock.nics.state import NetdevState

#: seconds a mock firmware burn takes at time scale 1 (the issue's 35 s burn that the 30 s
#: per-command timeout reported failed while it completed); divided by the mock's time scale
BURN_S = 35.0
#: seconds a mock level-3 reset takes at time scale 1 (driver unload, PCI reset, driver load)
RESET_S = 10.0

_CX6DX = {"device_type": "ConnectX6DX", "description": "ConnectX-6 Dx EN adapter card; 100GbE; Dual-port QSFP56",
          "link_type": True, "levels": {0: False, 3: True, 4: True}}
#: what each card's firmware exposes, by inventory NIC model (unknown models: the ConnectX-6 Dx)
FW_CARDS: dict[str, dict] = {
    "ConnectX-6 Dx": _CX6DX,
    "ConnectX-6 Dx (Dell OEM)": {**_CX6DX, "part_number": "0F6FXM_08P2T2_Ax", "psid": "DEL0000000027"},
    "ConnectX-6 Dx (no PCI reset)": {**_CX6DX, "levels": {0: False, 3: False, 4: True}},
    "ConnectX-4 Lx": {"device_type": "ConnectX4LX", "part_number": "MCX4121A-ACA_Ax", "psid": "MT_2420110034",
                      "fw": "14.32.1010", "description": "ConnectX-4 Lx EN network interface card; 25GbE dual-port SFP28",
                      "link_type": False, "levels": {0: False, 3: True, 4: True}},
}
#: the ranges the mock firmware takes (others: any non-negative number); out of range is refused
RANGES = {"LINK_TYPE_P1": (1, 3), "LINK_TYPE_P2": (1, 3), "SRIOV_EN": (0, 1), "NUM_OF_VFS": (0, 127),
          "ROCE_CC_PRIO_MASK_P1": (0, 255), "ROCE_CC_PRIO_MASK_P2": (0, 255), "CNP_DSCP_P1": (0, 63),
          "CNP_802P_PRIO_P1": (0, 7), "ATS_ENABLED": (0, 1)}
_LEVEL_TEXT = {0: 'Driver, PCI link, network link will remain up ("live-Patch")', 3: "Driver restart and PCI reset",
               4: "Warm Reboot"}


def card(nic) -> dict:
    """The firmware traits of ``nic``'s card (:data:`FW_CARDS`)."""
    return FW_CARDS.get(getattr(nic, "model", ""), _CX6DX)


def fit_card(nic, model: str) -> None:
    """Give a new mock NIC its card's identity and parameters: the model's part number and PSID
    where :data:`FW_CARDS` names them, and no LINK_TYPE parameters on a card without them."""
    if hasattr(nic, "model"):
        nic.model = model
    traits = FW_CARDS.get(model, _CX6DX)
    nic.part_number = traits.get("part_number", nic.part_number)
    nic.psid = traits.get("psid", nic.psid)
    nic.fw = traits.get("fw", nic.fw)
    if not traits["link_type"]:
        for d in (nic.mlx_current, nic.mlx_next):
            for k in ("LINK_TYPE_P1", "LINK_TYPE_P2"):
                d.pop(k, None)


def mock_image_sha256(image: str) -> str:
    """The mock firmware store's checksum of an image path (virtual images)."""
    return hashlib.sha256(f"mfctl mock firmware image {image.rsplit('/', 1)[-1]}".encode()).hexdigest()


def _image_id(image: str) -> tuple[str | None, str | None]:
    """(PSID, version) of a virtual image ``…-<PSID>-<22_39_1002>.bin`` (None, None when the name has none)."""
    m = re.search(r"-([A-Z]{2,3}_?\d{6,})-(\d+_\d+_\d+)\.bin$", image)
    return (m.group(1), m.group(2).replace("_", ".")) if m else (None, None)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _scaled_sleep(cfg, seconds: float) -> None:
    tb = getattr(cfg.host, "testbed", None)
    time.sleep(seconds / (tb.time_scale if tb is not None else 1.0))


def mlxconfig(cfg, args, out, err):
    if "-d" not in args:
        err("-E- Device not specified\n")
        return 1
    nic = cfg.nic_by_pci(args[args.index("-d") + 1])
    if nic is None:
        err(f"-E- Failed to open the device: {args[args.index('-d') + 1]}\n")
        return 1
    c = card(nic)
    hdr = (f"\nDevice #1:\n----------\n\nDevice type:        {c['device_type']:<20}\nName:               {nic.part_number}\n"
           f"Description:        {c['description']}\nDevice:             {nic.pci}\n\n")
    if "q" in args:
        rows = "".join(f"{'*' if nic.mlx_current[k] != nic.mlx_next[k] else ' '}       {k:<44}{nic.mlx_current[k]:<20}"
                       f"{nic.mlx_current[k]:<20}{nic.mlx_next[k]}\n" for k in sorted(nic.mlx_current))
        out(hdr + f"Configurations:{'':<41}Default             Current             Next Boot\n" + rows)
        return 0
    if "set" in args:
        changes = [a.split("=", 1) for a in args[args.index("set") + 1:]]
        refuse = getattr(nic, "refuse_setting", None)
        for k, v in changes:
            if k not in nic.mlx_current:
                err(f"-E- The Device doesn't support {k} parameter\n")
                return 3
            lo, hi = RANGES.get(k, (0, 2**32 - 1))
            if v.lstrip("-").isdigit() and not lo <= int(v) <= hi:
                err(f"-E- Failed to set configuration: value {v} of {k} is out of range {lo}..{hi}\n")
                return 3
            why = refuse(k, v) if refuse is not None else None
            if why:
                err(why + "\n")
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


def query_text(nic) -> str:
    """``mlxfwreset -d PCI query`` as mstflint prints it (``N: <description:62>-<Supported:14>(default)``)."""
    levels = card(nic)["levels"]
    default = next((lv for lv in sorted(levels) if levels[lv]), None)
    txt = "Reset-levels:\n"
    for lv in sorted(levels):
        txt += f"{lv}: {_LEVEL_TEXT[lv]:<62}-{'Supported' if levels[lv] else 'Not Supported':<14}" \
               f"{'(default)' if lv == default else ''}\n"
    txt += ("\nReset-types (relevant only for reset-levels 3,4):\n"
            f"0: {'Full chip reset':<62}-{'Supported':<14}(default)\n"
            f"1: {'Phy-less reset (keep network port active during reset)':<62}-{'Not Supported':<14}\n")
    return txt


def mlxfwreset(cfg, args, out, err):
    nic = cfg.nic_by_pci(args[args.index("-d") + 1]) if "-d" in args and args.index("-d") + 1 < len(args) else None
    if nic is None:
        err("-E- Device not found\n")
        return 1
    if "query" in args or "q" in args:
        out(query_text(nic))
        return 0
    if "reset" not in args and "r" not in args:
        err("-E- mlxfwreset: choose a command: query or reset\n")
        return 1
    levels = card(nic)["levels"]
    flag = "--level" if "--level" in args else "-l" if "-l" in args else None
    raw = args[args.index(flag) + 1] if flag and args.index(flag) + 1 < len(args) else None
    level = int(raw) if raw and raw.isdigit() else next((lv for lv in sorted(levels) if levels[lv]), None)
    if level is None or not levels.get(level, False):
        err(f"-E- Reset level {raw or level} is not supported for device {nic.pci}; "
            f"supported: {', '.join(str(lv) for lv in sorted(levels) if levels[lv]) or 'none'}\n")
        return 1
    if level >= 4:  # a reboot of the whole host: the mock does not pretend to reboot from here
        err(f"-E- reset level {level} ({_LEVEL_TEXT.get(level, '?')}) reboots the host: not modelled by the mock\n")
        return 1
    _scaled_sleep(cfg, RESET_S)
    _restart_driver(cfg, nic)
    out(f"The reset level for device, {nic.pci} is:\n\n{level}: {_LEVEL_TEXT[level]}\n"
        "-I- Stopping Driver                         -Done\n"
        "-I- Sending Reset Command To Fw             -Done\n-I- Resetting PCI                           -Done\n"
        "-I- Starting Driver                         -Done\n-I- Restarting MST                          -Done\n")
    return 0


def _restart_driver(cfg, nic) -> None:
    """A level-3 reset: the pending settings and firmware become active, and the driver restart
    recreates every netdev of the NIC (a re-split one under its new names): MTU 1500, no address,
    default QoS/ECN (a fresh :class:`NetdevState`)."""
    nic.mlx_current = dict(nic.mlx_next)
    split_of = getattr(nic, "firmware_split", None)
    split = split_of() if split_of is not None else int(nic.mlx_current.get("MODULE_SPLIT_M0", "1"))
    for nd in nic.netdevs:
        cfg.netdevs.pop(nd, None)
    nic.split = split
    for nd in nic.netdevs:
        cfg.netdevs[nd] = NetdevState()
    nic.trust, nic.pfc = "pcp", [0] * 8  # the card's QoS defaults (where it is kept per card)
    if nic.fw_pending:
        nic.fw, nic.fw_pending = nic.fw_pending, None


def _device_block(k: int, nic, available: str = "N/A", status: str | None = None) -> str:
    c = card(nic)
    mac = hashlib.sha256(f"{nic.psid}:{nic.pci}:{nic.name}".encode()).hexdigest()[:6]
    fw_rows = (f"     FW             {nic.fw_pending:<15}{available:<14}\n     FW (Running)   {nic.fw:<15}N/A\n"
               if nic.fw_pending else f"     FW             {nic.fw:<15}{available:<14}\n")
    status = status or ("Up to date, reset needed" if nic.fw_pending else "No matching image found")
    return (f"\nDevice #{k}:\n----------\n\n  Device Type:      {c['device_type']}\n  Part Number:      {nic.part_number}\n"
            f"  Description:      {c['description']}\n  PSID:             {nic.psid}\n"
            f"  PCI Device Name:  {nic.pci}\n  Base MAC:         b8cef6{mac}\n"
            f"  Versions:         Current        Available     \n{fw_rows}\n  Status:           {status}\n")


def mlxfwmanager(cfg, args, out, err):
    if "--query" in args:
        out("Querying Mellanox devices firmware ...\n" + "".join(_device_block(k, nic) for k, nic in
                                                                   enumerate(cfg.nics.values(), 1)))
        return 0
    if "-u" in args and "-i" in args and "-d" in args:
        nic = cfg.nic_by_pci(args[args.index("-d") + 1])
        image = args[args.index("-i") + 1]
        if nic is None:
            err("-E- Device not found\n")
            return 1
        psid, ver = _image_id(image)
        if psid != nic.psid or ver is None:  # an image is built for one PSID: another card's is refused
            out("Querying Mellanox devices firmware ...\n" + _device_block(1, nic, status="No matching image found"))
            err(f"-E- No matching image found for device {nic.pci} (PSID {nic.psid}) in {image}\n")
            return 1
        burnt = nic.fw_pending or nic.fw
        if _vkey(ver) <= _vkey(burnt) and "--force" not in args and "-f" not in args:
            # not newer: the tool leaves the device alone unless forced (MFT manual: --force)
            out("Querying Mellanox devices firmware ...\n" + _device_block(1, nic, ver, status="Up to date"))
            return 0
        _scaled_sleep(cfg, BURN_S)
        nic.fw_pending = ver if ver != nic.fw else None
        out(f"Device #1:\n  PSID: {nic.psid}\n  Versions: Current {burnt} Available {ver}\n\n"
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
