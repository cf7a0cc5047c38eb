"""NVIDIA/Mellanox tools: ``mlxconfig -e q``, ``mlxfwmanager --query``, ``mlnx_qos -i``,
``devlink -j port show``, ``mlxlink -d DEV`` (its Operational Info). Command builders take validated names; parsers take text.

``mlxconfig``: a ``Configurations:`` header names the columns (``Default Current Next
Boot`` with ``-e``; ``Next Boot`` alone; ``Next Boot New`` in ``set`` output); rows are
``NAME value value...`` with values like ``True(1)``, ``ETH(2)``, ``Array[0..15]``. A
parameter whose ``Current`` differs from ``Next Boot`` is *pending* until the firmware
reset (``mlxfwreset``) or a reboot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import line_at, normalized


def mlxconfig_query_argv(pci: str) -> list[str]:
    return ["mlxconfig", "-d", pci, "-e", "q"]


def mlxconfig_set_argv(pci: str, settings: dict[str, str]) -> list[str]:
    return ["mlxconfig", "-y", "-d", pci, "set", *[f"{k}={v}" for k, v in sorted(settings.items())]]


def mlxfwreset_query_argv(pci: str) -> list[str]:
    """``mlxfwreset -d PCI query``: the reset levels the device supports (:func:`parse_mlxfwreset_query`)."""
    return ["mlxfwreset", "-d", pci, "query"]


def mlxfwreset_argv(pci: str, level: int | None = None) -> list[str]:
    """``mlxfwreset -y -d PCI [--level N] reset`` (levels: :data:`RESET_LEVELS`)."""
    if level is not None and level not in RESET_LEVELS:
        raise ValueError(f"mlxfwreset has no reset level {level!r} (levels: {sorted(RESET_LEVELS)})")
    return ["mlxfwreset", "-y", "-d", pci, *(["--level", str(level)] if level is not None else []), "reset"]


def mlxfwmanager_query_argv() -> list[str]:
    return ["mlxfwmanager", "--query"]


def mlxfwmanager_burn_argv(pci: str, image: str, *, force: bool = False) -> list[str]:
    """``mlxfwmanager -u -y -d PCI -i IMAGE``; ``force`` adds ``--force``, which the real tool needs
    to burn an image that is not newer than the device's (MFT manual, "Updating Firmware Using an
    UPMF": "--force: Force firmware update even if the firmware ... is not newer")."""
    return ["mlxfwmanager", "-u", "-y", *(["--force"] if force else []), "-d", pci, "-i", image]


# --- firmware identity, versions and reset levels ----------------------------------------------

#: mlxfwreset's reset levels (mstflint ``mstfwreset --help``, MFT manual "mlxfwreset – Loading
#: Firmware on 5th Generation Devices Tool"): 0 keeps driver, PCI and network link up; 3 restarts
#: the driver (every netdev of the device is recreated); 4 and 5 reboot the host
RESET_LEVELS = {0: 'Driver, PCI link, network link will remain up ("live-Patch")',
                1: 'Only ARM side will not remain up ("Immediate reset").',
                3: "Driver restart and PCI reset", 4: "Warm Reboot", 5: "Cold Reboot"}


@dataclass
class ResetLevel:
    level: int
    description: str
    supported: bool
    default: bool = False


@normalized
def parse_mlxfwreset_query(text: str) -> dict[int, ResetLevel]:
    """The ``Reset-levels:`` block of ``mlxfwreset -d PCI query`` as {level: ResetLevel}. mstflint
    prints each row as ``N: <description padded to 62>-<Supported|Not Supported padded to 14>(default)``;
    the blocks after it (``Reset-types``, ``Reset-sync``) are not read. Raises ParseError without one."""
    out: dict[int, ResetLevel] = {}
    block = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        h = re.match(r"^(Reset-[A-Za-z]+)\b.*:$", s)
        if h:  # "Reset-levels:", "Reset-types (relevant only for reset-levels 1,3,4):", "Reset-sync (…):"
            block = h.group(1).lower()
            continue
        if block != "reset-levels":
            continue
        m = re.match(r"^(\d+):\s*(.*?)\s*-(Supported|Not Supported)\b(.*)$", s)
        if not m:
            raise ParseError("mlxfwreset query", no, "'N: description -Supported|Not Supported'", s)
        out[int(m.group(1))] = ResetLevel(int(m.group(1)), m.group(2).strip(), m.group(3) == "Supported",
                                          "(default)" in m.group(4))
    if not out:
        raise ParseError("mlxfwreset query", None, "a 'Reset-levels:' block", text.strip()[:80])
    return out


def version_key(v: str) -> tuple[int, ...]:
    """``"22.39.1002"`` → ``(22, 39, 1002)``: firmware versions compare field by field."""
    try:
        return tuple(int(x) for x in v.split("."))
    except ValueError:
        raise ParseError("firmware version", None, "digits separated by dots, e.g. 22.39.1002", v) from None


def is_oem_psid(psid: str | None) -> bool:
    """NVIDIA's own boards carry ``MT_`` PSIDs (``MT_0000000359``); a board an OEM customised carries
    the OEM's (Dell ``DEL0000000027``, Lenovo ``LNV2180110032``, HPE ``HPE…``) and takes only that
    OEM's images: flint/mlxfwmanager refuse an image of another PSID, and secure firmware refuses
    to change it ("Changing PSID is unsupported under Secure FW")."""
    return bool(psid) and not str(psid).startswith("MT_")


# --- mlxconfig parameters the recipe may set, with their ranges --------------------------------

@dataclass(frozen=True)
class MlxParam:
    """A known ``mlxconfig`` parameter: the values it takes (``lo``..``hi``, inclusive) and where
    the range comes from."""

    lo: int
    hi: int
    meaning: str
    source: str


_MFT = "MFT manual, 'Using mlxconfig' (docs.nvidia.com/networking/display/mftv4270/Using+mlxconfig)"
_NCO = "NVIDIA nic-configuration-operator README (github.com/Mellanox/nic-configuration-operator)"

#: the parameters mfctl knows; any other name is accepted only as a raw non-negative number
#: (:func:`check_mlxconfig_value`), and the firmware itself refuses what it does not take
MLXCONFIG_PARAMS: dict[str, MlxParam] = {
    **{f"LINK_TYPE_P{p}": MlxParam(1, 3, "port protocol: 1 IB, 2 ETH, 3 VPI", _MFT) for p in (1, 2)},
    "SRIOV_EN": MlxParam(0, 1, "SR-IOV off/on (boolean)", _MFT),
    "NUM_OF_VFS": MlxParam(0, 1024, "virtual functions per PF (the card's own maximum is the firmware's)", _MFT),
    **{f"ROCE_CC_PRIO_MASK_P{p}": MlxParam(0, 255, "congestion control per priority: a bit per priority 0..7",
                                            _NCO + " (sets 255)") for p in (1, 2)},
    **{f"CNP_DSCP_P{p}": MlxParam(0, 63, "DSCP of congestion notification packets (6-bit DSCP)",
                                  _NCO + " (sets 4)") for p in (1, 2)},
    **{f"CNP_802P_PRIO_P{p}": MlxParam(0, 7, "802.1p priority of CNPs", _NCO + " (sets 6)") for p in (1, 2)},
    "ATS_ENABLED": MlxParam(0, 1, "PCIe Address Translation Services (boolean)", _NCO + " (sets 0 for GPUDirect)"),
    "ADVANCED_PCI_SETTINGS": MlxParam(0, 1, "expose advanced PCIe settings (boolean)", _MFT),
    **{f"KEEP_ETH_LINK_UP_P{p}": MlxParam(0, 1, "keep the Ethernet link up (boolean)", _MFT) for p in (1, 2)},
}

#: parameters the recipe must not set itself, and why
MLXCONFIG_RESERVED = {"MODULE_SPLIT_M0": "it is the NIC's breakout (set from the inventory's breakout and lanes)"}

#: a parameter whose absence from ``mlxconfig q`` means the card fixes it (LINK_TYPE on Ethernet-only
#: ConnectX-4 Lx and others: nic-configuration-operator PR #19 "Link type change is not allowed on
#: some devices"; openshift/sriov-network-operator issue #48)
FIXED_WHEN_ABSENT = re.compile(r"^LINK_TYPE_P\d$")


def check_mlxconfig_value(name: str, value: int) -> str | None:
    """Why ``name=value`` cannot be set (a sentence naming the range and its source), or None."""
    if name in MLXCONFIG_RESERVED:
        return f"{name} is not set through mlxconfig in the recipe: {MLXCONFIG_RESERVED[name]}"
    p = MLXCONFIG_PARAMS.get(name)
    if p is None:
        return None if 0 <= value < 2**32 else f"{name}={value}: an unknown parameter takes only a raw number 0..4294967295"
    if not p.lo <= value <= p.hi:
        return f"{name}={value} is out of range: {p.lo}..{p.hi} ({p.meaning}; {p.source})"
    return None


def mlnx_qos_argv(netdev: str, trust: str | None = None, pfc: list[int] | None = None) -> list[str]:
    argv = ["mlnx_qos", "-i", netdev]
    if trust:
        argv += ["--trust", trust]
    if pfc is not None:
        argv += ["--pfc", ",".join(str(x) for x in pfc)]
    return argv


def devlink_ports_argv() -> list[str]:
    return ["devlink", "-j", "port", "show"]


_VAL = re.compile(r"^(?P<label>.*?)\((?P<code>-?\d+)\)$")


def value_code(v: str | None) -> str | None:
    """``True(1)`` → ``"1"``, ``ETH(2)`` → ``"2"``, ``9000`` → ``"9000"``: the number mlxconfig sets."""
    if v is None:
        return None
    m = _VAL.match(v)
    return m.group("code") if m else v


@dataclass
class MlxconfigDevice:
    device_type: str | None
    name: str | None
    device: str | None
    columns: list[str]
    params: dict[str, dict[str, str]] = field(default_factory=dict)  # NAME -> {column: value}

    def pending(self) -> dict[str, tuple[str, str]]:
        """Parameters whose next-boot value differs from the current one: {name: (current, next)}."""
        out = {}
        for k, cols in self.params.items():
            cur, nxt = cols.get("current"), cols.get("next_boot")
            if cur is not None and nxt is not None and value_code(cur) != value_code(nxt):
                out[k] = (cur, nxt)
        return out


@normalized
def parse_mlxconfig(text: str) -> list[MlxconfigDevice]:
    """Parse ``mlxconfig [-e] q`` or ``set`` output (one block per ``Device #N:``)."""
    devs: list[MlxconfigDevice] = []
    cur: MlxconfigDevice | None = None
    in_cfg = False
    for no, raw in enumerate(text.splitlines(), 1):
        ln = raw.rstrip()
        s = ln.strip()
        if not s or set(s) == {"-"}:
            continue
        if re.match(r"^Device #\d+:$", s):
            cur = MlxconfigDevice(None, None, None, [])
            devs.append(cur)
            in_cfg = False
            continue
        if s.startswith("Configurations:"):
            if cur is None:
                raise ParseError("mlxconfig", no, "'Device #N:' before 'Configurations:'", s)
            cols = re.split(r"\s{2,}", s[len("Configurations:"):].strip())
            cur.columns = [c.lower().replace(" ", "_") for c in cols if c]
            if not cur.columns:
                raise ParseError("mlxconfig", no, "column names after 'Configurations:'", s)
            in_cfg = True
            continue
        if s.startswith(("Apply new Configuration", "Applying", "-I-", "-E-", "-W-")):
            in_cfg = False
            if s.startswith("-E-"):
                raise ParseError("mlxconfig", no, "no error", s)
            continue
        if in_cfg and raw.startswith((" ", "\t", "*")):
            parts = s.lstrip("*").split()
            if len(parts) < 2:
                raise ParseError("mlxconfig", no, "'NAME value...'", s)
            name, vals = parts[0], parts[1:]
            cur.params[name] = dict(zip(cur.columns[-len(vals):] if len(vals) <= len(cur.columns) else cur.columns, vals))
            continue
        m = re.match(r"^(Device type|Name|Description|Device):\s*(.*)$", s)
        if m and cur is not None:
            key = {"Device type": "device_type", "Name": "name", "Device": "device"}.get(m.group(1))
            if key:
                setattr(cur, key, m.group(2).strip())
            continue
        if in_cfg:
            raise ParseError("mlxconfig", no, "an indented 'NAME value' row", s)
    if not devs:
        raise ParseError("mlxconfig", 1, "'Device #1:'", text.strip().splitlines()[0] if text.strip() else "")
    return devs


@dataclass
class FirmwareDevice:
    device_type: str | None
    part_number: str | None
    psid: str | None
    pci: str | None
    fw_current: str | None  # the burnt image ("FW" row)
    fw_available: str | None
    status: str | None
    fw_running: str | None = None  # "FW (Running)" row: differs from fw_current until a reset
    base_mac: str | None = None  # "Base MAC": the card's own identity (its PCI address may change)

    @property
    def running(self) -> str | None:
        return self.fw_running or self.fw_current


@normalized
def parse_mlxfwmanager(text: str) -> list[FirmwareDevice]:
    """Parse ``mlxfwmanager --query``. A ``FW (Running)`` row (burnt image not yet active)
    is kept apart from the ``FW`` row."""
    devs: list[FirmwareDevice] = []
    cur: dict | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or set(s) == {"-"} or s.startswith("Querying"):
            continue
        if re.match(r"^Device #\d+:$", s):
            cur = {}
            devs.append(cur)
            continue
        if cur is None:
            raise ParseError("mlxfwmanager", no, "'Device #N:'", s)
        m = re.match(r"^FW \(Running\)\s+(\S+)", s)
        if m:
            cur["fw_running"] = m.group(1)
            continue
        m = re.match(r"^FW\s+(\S+)\s+(\S+)", s)
        if m:
            cur["fw_current"], cur["fw_available"] = m.group(1), None if m.group(2) == "N/A" else m.group(2)
            continue
        m = re.match(r"^([A-Za-z ]+?):\s*(.*)$", s)
        if m:
            cur[m.group(1).strip()] = m.group(2).strip()
    if not devs:
        raise ParseError("mlxfwmanager", 1, "'Device #1:'", text.strip()[:80])
    out = []
    for d in devs:
        if "fw_current" not in d:
            raise ParseError("mlxfwmanager", None, "a 'FW <current> <available>' row in every device", str(d)[:80])
        out.append(FirmwareDevice(d.get("Device Type"), d.get("Part Number"), d.get("PSID"),
                                  d.get("PCI Device Name"), d["fw_current"], d.get("fw_available"), d.get("Status"),
                                  d.get("fw_running"), d.get("Base MAC")))
    return out


@dataclass
class QosState:
    trust: str | None
    pfc_enabled: list[int]  # per priority 0..7


@normalized
def parse_mlnx_qos(text: str) -> QosState:
    """Parse ``mlnx_qos -i IF``: ``Priority trust state: dscp`` and the PFC ``enabled`` row."""
    trust = None
    pfc = None
    for raw in text.splitlines():
        s = raw.strip()
        m = re.match(r"^Priority trust (?:state|mode):\s*(\S+)", s)
        if m:
            trust = m.group(1)
        m = re.match(r"^enabled\s+((?:[01]\s*){8})$", s)
        if m:
            pfc = [int(x) for x in m.group(1).split()]
    if pfc is None:
        raise ParseError("mlnx_qos", None, "a PFC 'enabled 0 0 0 1 0 0 0 0' row", text.strip()[:80])
    return QosState(trust, pfc)


@dataclass
class DevlinkPort:
    name: str  # pci/0000:0c:00.0/1
    netdev: str | None
    flavour: str | None
    splittable: bool
    lanes: int | None
    split_group: int | None


@normalized
def parse_devlink_ports(text: str) -> dict[str, DevlinkPort]:
    """Parse ``devlink -j port show`` into ports keyed by netdev (or port name)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError("devlink -j", e.lineno, "JSON", line_at(text, e.lineno)[:80]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("port"), dict):
        raise ParseError("devlink -j", 1, '{"port": {...}}', text[:80])
    out = {}
    for name, p in doc["port"].items():
        if not isinstance(p, dict):
            raise ParseError("devlink -j", 1, f"an object for port {name}", str(p)[:80])
        dp = DevlinkPort(name, p.get("netdev"), p.get("flavour"), bool(p.get("splittable")), p.get("lanes"),
                         p.get("split_group"))
        out[dp.netdev or name] = dp
    return out


def mlxlink_argv(device: str) -> list[str]:
    return ["mlxlink", "-d", device]


@normalized
def parse_mlxlink(text: str) -> dict[str, str]:
    """The ``Operational Info`` block of ``mlxlink`` as {key: value}."""
    out: dict[str, str] = {}
    block = None
    for raw in text.splitlines():
        s = raw.strip()
        if not s or set(s) == {"-"}:
            continue
        if ":" not in s:
            block = s
            continue
        if block == "Operational Info":
            k, _, v = s.partition(":")
            out[k.strip()] = v.strip()
    if not out:
        raise ParseError("mlxlink", None, "an 'Operational Info' block with 'Key : value' lines", text.strip()[:80])
    return out
