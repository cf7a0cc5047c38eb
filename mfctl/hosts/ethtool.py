"""ethtool: link settings (``ethtool IF``) and transceiver DOM (``ethtool -m IF``).

Link settings: ``Settings for IF:`` then indented ``Key: value`` lines (continuation lines
of link-mode lists are indented further); ``Speed: 40000Mb/s`` or ``Speed: Unknown!``,
``Link detected: no (Cable issue, Unsupported cable)``.

Module info (SFF-8636 QSFP28 and CMIS QSFP-DD/OSFP layouts): ``Key : value`` lines; per
channel values carry ``(Channel N)`` or ``(Chan N)``; powers are ``1.0778 mW / 0.33 dBm``
(``-inf dBm`` = no light: missing data, never a number); thresholds are
``... low warning threshold : 0.0631 mW / -12.00 dBm``.

A module without digital monitoring — a passive copper cable (DAC), or "Alarm/warning flags
implemented : No" with a 0.0000 V supply — prints zeros ("0.00 degrees C", "0.0000 V",
"0.000 mA", "0.0000 mW"): missing data, never a reading (``ModuleInfo.dom`` False, the readings
None). CMIS modules (ethtool's ``cmis.c`` / ``module-common.c``) print per-lane status as
``Rx loss of signal : [ Yes, No, … ]`` (lane 1 first; ``None`` when no lane is flagged) and the
module state machine as ``Module State : 0x01 (ModuleLowPwr)`` with ``LowPwrAllowRequestHW`` /
``LowPwrRequestSW`` On/Off. A ``| grep`` excerpt that starts at those status lines is read too
(its identifier is "").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

_KV = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_CHAN = re.compile(r"\((?:Channel|Chan)\s+(\d+)\)")
_DBM = re.compile(r"(-?(?:\d+(?:\.\d+)?|inf))\s*dBm")
_NUM = re.compile(r"^(-?\d+(?:\.\d+)?)")


def link_argv(netdev: str) -> list[str]:
    return ["ethtool", netdev]


def module_argv(netdev: str) -> list[str]:
    return ["ethtool", "-m", netdev]


@dataclass
class LinkSettings:
    netdev: str
    speed_mbps: int | None  # None: "Unknown!"
    duplex: str | None
    link_detected: bool
    link_down_reason: str | None = None
    lanes: int | None = None


@normalized
def parse_link(text: str) -> LinkSettings:
    """Parse ``ethtool IF``. Raises ParseError naming the line."""
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise ParseError("ethtool", 1, "'Settings for IF:'", "")
    m = re.match(r"^\s*Settings for (\S+):\s*$", lines[first])
    if not m:
        raise ParseError("ethtool", first + 1, "'Settings for IF:'", lines[first])
    kv: dict[str, str] = {}
    for ln in lines[first + 1:]:
        mm = _KV.match(ln)
        if mm and not ln.startswith(" " * 20):
            kv[mm.group(1)] = mm.group(2)
    if "Link detected" not in kv:
        raise ParseError("ethtool", len(lines), "a 'Link detected:' line", lines[-1] if lines else "")
    sp = kv.get("Speed", "")
    ms = re.match(r"^(\d+)Mb/s$", sp)
    ld = kv["Link detected"]
    reason = re.search(r"\((.*)\)", ld)
    lanes = kv.get("Lanes")
    return LinkSettings(netdev=m.group(1), speed_mbps=int(ms.group(1)) if ms else None,
                        duplex=None if kv.get("Duplex", "").startswith("Unknown") else kv.get("Duplex"),
                        link_detected=ld.lower().startswith("yes"), link_down_reason=reason.group(1) if reason else None,
                        lanes=int(lanes) if lanes and lanes.isdigit() else None)


@dataclass
class ModuleInfo:
    """DOM readings and the module's own thresholds. Powers in dBm, bias in mA, °C, V."""

    layout: str  # "SFF-8636" or "CMIS"
    identifier: str
    vendor: str | None
    part_number: str | None
    temperature_c: float | None
    voltage_v: float | None
    tx_power_dbm: dict[int, float | None] = field(default_factory=dict)
    rx_power_dbm: dict[int, float | None] = field(default_factory=dict)
    bias_ma: dict[int, float | None] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)  # e.g. "rx_power_low_warning_dbm"
    flags_on: list[str] = field(default_factory=list)  # alarm/warning flags reported On
    dom: bool = True  # False: no digital monitoring (a DAC): every reading above is None, not 0
    copper: bool = False  # a copper cable assembly (Transmitter technology "Copper cable …")
    module_state: str | None = None  # CMIS: ModuleLowPwr, ModulePwrUp, ModuleReady, ModulePwrDn, ModuleFault
    low_power_request_sw: bool | None = None  # CMIS LowPwrRequestSW (the host asked for low power)
    low_power_allow_request_hw: bool | None = None  # CMIS LowPwrAllowRequestHW (the LPMode pin may ask)
    lanes_flagged: dict[str, list[int]] = field(default_factory=dict)  # "rx_los" → lanes (1-based) saying Yes
    lane_count: int | None = None  # lanes in the CMIS per-lane lists (None: every list said None)

    def rx_low_warning_dbm(self) -> float | None:
        return self.thresholds.get("rx_power_low_warning_dbm")


def _dbm(v: str) -> float | None:
    m = _DBM.search(v)
    if not m or m.group(1) == "inf" or m.group(1) == "-inf":
        return None
    x = float(m.group(1))
    return None if x <= -40.0 else x  # -40 dBm is the SFF-8636 "0.0001 mW" floor: no light


#: CMIS per-lane status lists (ethtool module-common.c) → ModuleInfo.lanes_flagged keys.
LANE_STATUS = {"Rx loss of signal": "rx_los", "Tx loss of signal": "tx_los", "Rx loss of lock": "rx_lol",
               "Tx loss of lock": "tx_lol", "Tx fault": "tx_fault", "Tx adaptive eq fault": "tx_eq_fault"}


def _lanes(v: str) -> list[bool] | None:
    """``[ Yes, No, … ]`` → per-lane booleans; ``None`` (no lane flagged) → []; else None."""
    if v.strip() == "None":
        return []
    m = re.fullmatch(r"\[\s*((?:Yes|No)(?:\s*,\s*(?:Yes|No))*)\s*\]", v.strip())
    return [x.strip() == "Yes" for x in m.group(1).split(",")] if m else None


def _num(v: str) -> float | None:
    m = _NUM.match(v)
    return float(m.group(1)) if m else None


_THRESH = re.compile(r"^(Laser output power|Laser rx power|Laser bias current|Module temperature|Module voltage) "
                     r"(high|low) (alarm|warning) threshold$")
_THRESH_KEY = {"Laser output power": ("tx_power", "dbm"), "Laser rx power": ("rx_power", "dbm"),
               "Laser bias current": ("bias", "ma"), "Module temperature": ("temperature", "c"),
               "Module voltage": ("voltage", "v")}


@normalized
def parse_module(text: str) -> ModuleInfo:
    """Parse ``ethtool -m IF`` (SFF-8636 or CMIS). Raises ParseError naming the line."""
    lines = [ln for ln in text.splitlines()]
    kvs: list[tuple[int, str, str]] = []
    for no, ln in enumerate(lines, 1):
        if not ln.strip():
            continue
        m = _KV.match(ln)
        if not m:
            raise ParseError("ethtool -m", no, "'Key : value'", ln)
        kvs.append((no, m.group(1), m.group(2)))
    excerpt = bool(kvs) and kvs[0][1] in (*LANE_STATUS, "Module State")  # a `| grep` of a CMIS module's status
    if not kvs or (kvs[0][1] != "Identifier" and not excerpt):
        raise ParseError("ethtool -m", kvs[0][0] if kvs else 1, "an 'Identifier' line first",
                         f"{kvs[0][1]} : {kvs[0][2]}" if kvs else "")
    ident = "" if excerpt else kvs[0][2]  # "": an excerpt without the Identifier line
    layout = "CMIS" if excerpt or re.search(r"0x1[89]|QSFP-DD|OSFP|CMIS", ident) else "SFF-8636"
    kv = {k: v for _, k, v in kvs}
    info = ModuleInfo(layout=layout, identifier=ident, vendor=kv.get("Vendor name"), part_number=kv.get("Vendor PN"),
                      temperature_c=_num(kv.get("Module temperature", "")),
                      voltage_v=_num(kv.get("Module voltage", "")))
    for no, k, v in kvs:
        if k in LANE_STATUS:
            lanes = _lanes(v)
            if lanes is None:
                raise ParseError("ethtool -m", no, "'[ Yes, No, … ]' or 'None'", f"{k} : {v}")
            info.lanes_flagged[LANE_STATUS[k]] = [i for i, on in enumerate(lanes, 1) if on]
            info.lane_count = len(lanes) or info.lane_count
            continue
        if k == "Module State":
            st = re.search(r"\((\w+)\)", v)
            info.module_state = st.group(1) if st else v or None
            continue
        if k in ("LowPwrRequestSW", "LowPwrAllowRequestHW"):
            flag = {"On": True, "Off": False}.get(v)
            if k == "LowPwrRequestSW":
                info.low_power_request_sw = flag
            else:
                info.low_power_allow_request_hw = flag
            continue
        ch = _CHAN.search(k)
        base = _CHAN.sub("", k).strip()
        if ch:
            n = int(ch.group(1))
            if base.startswith("Transmit avg optical power"):
                info.tx_power_dbm[n] = _dbm(v)
            elif base.startswith("Rcvr signal avg optical power"):
                info.rx_power_dbm[n] = _dbm(v)
            elif base == "Laser tx bias current":
                x = _num(v)
                info.bias_ma[n] = x
            elif v == "On" and ("alarm" in base or "warning" in base):
                info.flags_on.append(f"{base} (channel {n})")
            continue
        t = _THRESH.match(k)
        if t:
            name, unit = _THRESH_KEY[t.group(1)]
            x = _dbm(v) if unit == "dbm" else _num(v)
            if x is None and unit != "dbm":
                raise ParseError("ethtool -m", no, "a number for the threshold", f"{k} : {v}")
            if x is not None:
                info.thresholds[f"{name}_{t.group(2)}_{t.group(3)}_{unit}"] = x
        elif v == "On" and ("alarm" in k or "warning" in k):
            info.flags_on.append(k)
    _no_dom(info, kv)
    return info


def _no_dom(info: ModuleInfo, kv: dict[str, str]) -> None:
    """A module without monitoring reads 0 °C and 0 V: make its readings missing (see the module
    docstring). A 0.0000 V supply is never a powered module's reading."""
    info.copper = "copper" in kv.get("Transmitter technology", "").lower()
    flags = kv.get("Alarm/warning flags implemented", "").strip().lower()
    zero = info.voltage_v == 0.0 and (info.temperature_c in (0.0, None))
    if not (zero or (info.copper and flags == "no")):
        return
    info.dom = False
    info.temperature_c = info.voltage_v = None
    for d in (info.tx_power_dbm, info.rx_power_dbm, info.bias_ma):
        for ch in d:
            d[ch] = None


def stats_argv(netdev: str) -> list[str]:
    return ["ethtool", "-S", netdev]


@dataclass
class NICStats:
    counters: dict[str, int]

    def prio(self, direction: str, p: int, what: str = "bytes") -> int:
        return self.counters.get(f"{direction}_prio{p}_{what}", 0)

    def prio_bytes(self) -> dict[int, int]:
        """Bytes per priority (rx + tx) for priorities that have counters."""
        out = {}
        for p in range(8):
            if f"rx_prio{p}_bytes" in self.counters or f"tx_prio{p}_bytes" in self.counters:
                out[p] = self.prio("rx", p) + self.prio("tx", p)
        return out


#: mlx5 physical-layer error counters (``ethtool -S``): frames lost to the link itself — a dirty
#: connector, a failing transceiver or fibre (mlx5 ethtool counters, NVIDIA MLNX_OFED docs).
PHY_ERRORS = ("rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy", "rx_in_range_len_errors_phy",
              "rx_out_of_range_len_phy", "rx_too_long_errors_phy", "tx_errors_phy")
#: drops for lack of buffers: on a lossless RoCE priority they point at PFC/buffer settings.
DROPS = ("rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer")


def nonzero(stats: "NICStats", names: tuple[str, ...]) -> dict[str, int]:
    """The counters of ``names`` that are above zero (counters count since the driver loaded)."""
    return {n: stats.counters[n] for n in names if stats.counters.get(n, 0) > 0}


@normalized
def parse_stats(text: str) -> NICStats:
    """Parse ``ethtool -S IF`` (with or without the ``NIC statistics:`` header, any indentation,
    or a ``| grep`` excerpt). Raises ParseError on a line that is not ``name: integer``."""
    counters: dict[str, int] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s == "NIC statistics:":
            continue
        m = re.match(r"^([A-Za-z0-9_.\[\]-]+):\s*(-?\d+)$", s)
        if not m:
            raise ParseError("ethtool -S", no, "'counter: integer'", s)
        counters[m.group(1)] = int(m.group(2))
    if not counters:
        raise ParseError("ethtool -S", 1, "at least one counter", text[:80])
    return NICStats(counters)
