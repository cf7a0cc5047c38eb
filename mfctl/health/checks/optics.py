"""The ``optics`` check: transceiver DOM (``ethtool -m``) on every lit OCS lane, against each
module's own alarm (critical) and warning thresholds (SFF-8636 / CMIS)."""

from __future__ import annotations

import re

from mfctl.health.checks.base import Check, Probe, fold_numbers
from mfctl.hosts import ethtool

#: The DOM quantities of ``ethtool -m`` judged against the module's own thresholds (SFF-8636 /
#: CMIS): (name in the thresholds' keys, ModuleInfo field, unit, unit key, the flags' words).
DOM = (("temperature", "temperature_c", "C", "c", "Module temperature"), ("voltage", "voltage_v", "V", "v", "Module voltage"),
       ("tx_power", "tx_power_dbm", "dBm", "dbm", "Laser tx power"), ("rx_power", "rx_power_dbm", "dBm", "dbm", "Laser rx power"),
       ("bias", "bias_ma", "mA", "ma", "Laser bias current"))
_FLAG = re.compile(r"^(?P<w>[A-Za-z ]+?) (?P<side>high|low) (?P<level>alarm|warning)(?: \(channel (?P<ch>\d+)\))?$")


def _lasers_off(mod, out: list, seen: set) -> set:
    """The unused channels (laser off while others work); every laser off is one critical finding."""
    unused = {ch for ch, b in mod.bias_ma.items() if (b or 0.0) == 0.0 and mod.tx_power_dbm.get(ch) is None}
    if unused and unused == set(mod.bias_ma):  # every laser off: nothing is sent (disabled, or a failed module)
        out.append(("critical", "optics.laser_off", None, sorted(unused), None, None,
                    "every laser is off (bias 0 mA, no Tx power): the module sends nothing"))
        seen |= {("bias", ch, "low") for ch in mod.bias_ma} | {("tx_power", ch, "low") for ch in mod.bias_ma}
        return set()
    return unused


def _beyond(th: dict, q: str, ukey: str, v: float):
    """The first threshold ``v`` is beyond: (level, severity, side, limit), or None."""
    for level, sev in (("alarm", "critical"), ("warning", "warning")):
        hi, lo = th.get(f"{q}_high_{level}_{ukey}"), th.get(f"{q}_low_{level}_{ukey}")
        if hi is not None and v > hi:
            return level, sev, "high", hi
        if lo is not None and v < lo:
            return level, sev, "low", lo
    return None


def _readings(mod, unused: set, out: list, seen: set) -> None:
    th = mod.thresholds
    for q, attr, unit, ukey, words in DOM:
        vals, shown = getattr(mod, attr), "°C" if unit == "C" else unit
        for ch, v in (vals.items() if isinstance(vals, dict) else [(None, vals)]):
            if ch in unused or (q, ch, "low") in seen:
                continue
            if v is None:
                if q == "rx_power":
                    out.append(("critical", "optics.rx_power_low", ch, None, th.get("rx_power_low_alarm_dbm"), unit,
                                "no Rx light (no power reading)"))
                    seen.add((q, ch, "low"))
                continue
            hit = _beyond(th, q, ukey, v)
            if hit:
                level, sev, side, limit = hit
                out.append((sev, f"optics.{q}_{side}", ch, v, limit, unit,
                            f"{words} {v:g} {shown} {'above' if side == 'high' else 'below'} the module's {level} threshold "
                            f"{limit:g} {shown}"))
                seen.add((q, ch, side))


def _flags(mod, unused: set, out: list, seen: set) -> None:
    quantity = {words.lower(): q for q, _, _, _, words in DOM}
    for f in mod.flags_on:
        m = _FLAG.match(f)
        q = quantity.get(m["w"].lower()) if m else None
        ch = int(m["ch"]) if m and m["ch"] else None
        if m and ((q, ch, m["side"]) in seen or ch in unused):
            continue
        out.append(("critical" if "alarm" in f else "warning", "optics.flag", ch, f, None, None, f"the module reports {f}"))


def judge_module(mod) -> list[tuple]:
    """Findings for one transceiver (:class:`mfctl.hosts.ethtool.ModuleInfo`): every DOM reading
    (module temperature and voltage; per channel Tx power, Rx power, laser bias) against the
    module's own high/low alarm (critical) and warning thresholds, then the module's alarm and
    warning flags that no reading explains (a latched flag: the event has passed). A channel
    whose laser is off (bias 0 mA, no Tx power) is unused — the upper channels of a 4-lane
    module in an 8-lane CMIS cage — and not judged; an active channel with no Rx reading is
    dark: no light arrives (critical). A module without monitoring (a DAC, ``dom`` False) has no
    reading to judge: nothing is reported. A CMIS module not in ModuleReady is one critical finding
    naming its state and the cause (LowPwrRequestSW / LowPwrAllowRequestHW), instead of its dark
    lanes; a ready module's lanes reporting Rx loss of signal without a reading saying so are
    critical too. Returns ``(severity, code, channel or None, value,
    limit, unit, message)`` tuples."""
    out: list[tuple] = []
    seen: set[tuple] = set()
    if not getattr(mod, "dom", True):  # a DAC without monitoring: its zeros are missing data, not "no light"
        return out
    state = getattr(mod, "module_state", None)
    if state and state != "ModuleReady":  # CMIS: the lasers are off because of the module's state
        out.append(("critical", "optics.module_not_ready", None, state, None, None, _not_ready(mod, state)))
        return out
    unused = _lasers_off(mod, out, seen)
    _readings(mod, unused, out, seen)
    los = [ch for ch in getattr(mod, "lanes_flagged", {}).get("rx_los", [])
           if ch not in unused and ("rx_power", ch, "low") not in seen]
    if len(los) == 1:
        out.append(("critical", "optics.rx_los", los[0], None, None, None, "the module reports Rx loss of signal"))
    elif los:  # one finding for the module, its lanes as the value
        out.append(("critical", "optics.rx_los", None, los, None, None,
                    f"the module reports Rx loss of signal on {len(los)} lanes ({fold_numbers(los)})"))
    _flags(mod, unused, out, seen)
    return out


def _not_ready(mod, state: str) -> str:
    """Why a CMIS module is not ModuleReady, in the module's own words (CMIS 4/5 module state machine:
    low power when LowPwrRequestSW is set, or LowPwrAllowRequestHW with the LPMode pin asserted)."""
    why = {"ModuleLowPwr": "in low power", "ModulePwrUp": "still powering up", "ModulePwrDn": "powering down",
           "ModuleFault": "in a fault state"}.get(state, "not ready")
    if state == "ModuleLowPwr":
        if mod.low_power_request_sw:
            why += " because the host's software asked for it (LowPwrRequestSW On)"
        elif mod.low_power_allow_request_hw:
            why += " (LowPwrAllowRequestHW On: the host's LPMode signal holds it there)"
    los = mod.lanes_flagged.get("rx_los", [])
    lanes = ("; every lane reports Rx loss of signal" if los and len(los) == mod.lane_count
             else f"; lanes {', '.join(map(str, los))} report Rx loss of signal" if los else "")
    return f"module state {state}: the module is {why}, so its lasers are off{lanes}"


def _lit_ocs_lanes(p: Probe) -> dict[str, list[str]]:
    up = p.facts.get("links_up", set())
    return {lane.netdev: ethtool.module_argv(lane.netdev) for nic in p.host.nics for lane in nic.lanes
            if lane.ocs_tx is not None and lane.netdev in up}


def judge_optics(p: Probe, data: dict) -> None:
    for netdev, mod in data.items():
        for sev, code, part, v, limit, unit, msg in judge_module(mod):
            p.add(sev, f"{netdev}{f' channel {part}' if part else ''}: {msg}", code,
                  component=f"{netdev}/{part}" if part else netdev, value=v, limit=limit, unit=unit)


OPTICS = Check("optics", "optics", "ethtool -m IF (every OCS lane that is up)",
               "module temperature and voltage, per channel Tx/Rx power and laser bias against the module's own "
               "thresholds; flags no reading explains", _lit_ocs_lanes, ethtool.parse_module, judge_optics, needs=("links",))
