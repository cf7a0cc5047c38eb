"""health on the parsers' new shapes (issue 19): DCGM per-GPU failures, DACs without DOM and CMIS
modules in low power."""

from __future__ import annotations

from unit.health.test_health_checks import Answers

from mfctl import health
from mfctl.inventory import load_inventory
from support import DATA, PROTOTYPE


def test_dcgm_names_gpu0s_memory_failure_from_a_pass_row():
    inv = load_inventory(PROTOTYPE)
    text = (DATA / "dcgm" / "diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt").read_text()
    [hh] = health.sweep(Answers({("dcgmi", "diag"): text}), inv, ["gpu01"], checks=["dcgm"]).targets
    assert [f.component for f in hh.findings] == ["GPU Memory (GPU 0)", "Diagnostic", "Targeted Stress"]


def test_a_dac_without_dom_reads_missing_data_and_is_no_optics_finding():
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts.ethtool import parse_module

    m = parse_module((DATA / "ethtool" / "m-sff8636-qsfp28-dac-no-dom-built.txt").read_text())
    assert (m.dom, m.copper, m.temperature_c, m.voltage_v) == (False, True, None, None)  # "0.00 degrees C", "0.0000 V"
    assert m.bias_ma == {1: None, 2: None, 3: None, 4: None} and set(m.rx_power_dbm.values()) == {None}
    assert judge_module(m) == []  # not "no Rx light": a copper cable has no light to measure


def test_a_cmis_module_in_low_power_names_the_cause_not_eight_dark_lanes():
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts.ethtool import parse_module

    m = parse_module((DATA / "ethtool" / "m-cmis40-qsfpdd-400g-low-power-all-lanes-los-built.txt").read_text())
    assert (m.module_state, m.low_power_request_sw, m.low_power_allow_request_hw) == ("ModuleLowPwr", True, True)
    assert m.lanes_flagged["rx_los"] == list(range(1, 9)) and m.lanes_flagged["rx_lol"] == list(range(1, 9))
    assert m.lanes_flagged["tx_los"] == [] and m.lane_count == 8
    [(sev, code, ch, value, _, _, msg)] = judge_module(m)
    assert (sev, code, ch, value) == ("critical", "optics.module_not_ready", None, "ModuleLowPwr")
    assert "LowPwrRequestSW On" in msg and "every lane reports Rx loss of signal" in msg


def test_a_ready_cmis_module_keeps_its_readings_and_states_none_lanes():
    from mfctl.hosts.ethtool import parse_module

    m = parse_module((DATA / "ethtool" / "m-cmis40-qsfpdd-400g-xdr4-temp-warning.txt").read_text())  # real capture
    assert (m.module_state, m.low_power_request_sw, m.low_power_allow_request_hw, m.dom) == ("ModuleReady", False, True, True)
    assert m.lanes_flagged == {"rx_los": [], "tx_los": [], "rx_lol": [], "tx_lol": [], "tx_fault": []}
    assert (m.temperature_c, m.voltage_v) == (70.49, 3.2186)


def test_lane_lists_and_their_errors():
    import pytest

    from mfctl.errors import ParseError
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts.ethtool import parse_module

    base = (DATA / "ethtool" / "m-cmis40-qsfpdd-400g-xdr4-temp-warning.txt").read_text()
    m = parse_module(base.replace("Rx loss of signal                         : None",
                                  "Rx loss of signal                         : [ No, Yes, No, No, No, No, No, No ]"))
    assert m.lanes_flagged["rx_los"] == [2]
    assert ("critical", "optics.rx_los", 2) in [f[:3] for f in judge_module(m)]
    with pytest.raises(ParseError) as e:
        parse_module(base.replace("Rx loss of signal                         : None",
                                  "Rx loss of signal                         : [ Yes, Maybe ]"))
    assert (e.value.tool, e.value.line_no) == ("ethtool -m", 25)


def test_dcgm_failure_message_carries_dcgms_warning():
    inv = load_inventory(PROTOTYPE)
    text = (DATA / "dcgm" / "diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt").read_text()
    [hh] = health.sweep(Answers({("dcgmi", "diag"): text}), inv, ["gpu01"], checks=["dcgm"]).targets
    msg = {f.component: f.message for f in hh.findings}
    head, _, why = msg["GPU Memory (GPU 0)"].partition(" failed: ")
    assert head.endswith("GPU Memory (GPU 0)") and len(why) == 200  # DCGM's warning, cut at 200 characters
    assert why.startswith("GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU.")
    assert msg["Targeted Stress"].endswith("Targeted Stress failed")  # no Warning row under it in the excerpt


def test_a_real_cmis_lane_status_excerpt_is_read_and_its_dark_lanes_are_one_finding():
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts.ethtool import parse_module

    # netdev list, Ido Schimmel testing ethtool's LOS/LOL report (a 16-lane module, the port itself down)
    m = parse_module((DATA / "ethtool" / "m-cmis-grep-lane-status-16-lanes-port-down.txt").read_text())
    assert (m.layout, m.identifier, m.module_state, m.lane_count) == ("CMIS", "", "ModuleReady", 16)
    assert m.lanes_flagged == {"rx_los": list(range(1, 17)), "tx_los": list(range(1, 9)),
                               "rx_lol": list(range(1, 9)), "tx_lol": list(range(1, 9))}
    assert judge_module(m) == [("critical", "optics.rx_los", None, list(range(1, 17)), None, None,
                                "the module reports Rx loss of signal on 16 lanes (1-16)")]


def test_a_real_dac_without_dom_reads_missing_data():
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts.ethtool import parse_module

    # NVIDIA SONiC 202012 docs (Management Utilities, "ethtool"): a 10Gtek 40G QSFP+ DAC on a Spectrum switch
    m = parse_module((DATA / "ethtool" / "m-sff8636-qsfp-40g-dac-10gtek-no-dom.txt").read_text())
    assert (m.identifier, m.vendor, m.part_number) == ("0x0d (QSFP+)", "10Gtek", "CAB-Q10/Q10-P1M")
    assert (m.dom, m.copper, m.temperature_c, m.voltage_v) == (False, True, None, None)  # "0.00 degrees C", "0.0000 V"
    assert judge_module(m) == []
