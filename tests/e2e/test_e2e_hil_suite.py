"""The sample HIL suite (examples/hil) as CI runs it: on the embedded mock with no option, and with
--mfctl-inventory on a second mock standing in for the hardware; the JUnit files mfctl itself writes
(mfctl health --junit, mfctl run --junit) valid against junit-10.xsd, through the CLI."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from mfctl import mockctl
from support import DATA, PROTOTYPE, ROOT, mfctl_cmd

HIL = ROOT / "examples" / "hil"
XSD = DATA / "junit" / "junit-10.xsd"


def _pytest_hil(tmp_path, env, *args):
    xml = tmp_path / "hil.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", str(HIL), f"--junitxml={xml}", *args], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    return r, ET.parse(xml).getroot() if xml.exists() else None


def _cases(root):
    return {tc.get("name"): [c.tag for c in tc if c.tag in ("failure", "error", "skipped")] for tc in root.iter("testcase")}


EXPECTED = {"test_a_circuit_brings_both_lanes_up": [], "test_the_marker_puts_circuits_up_for_the_test": [],
            "test_every_host_reports_its_gpus_alike": [], "test_the_gpu_checks_pass": [],
            "test_a_short_run_trains_and_reconfigures": []}


def test_the_sample_suite_on_the_embedded_mock(tmp_path, cli_env):
    r, root = _pytest_hil(tmp_path, cli_env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 passed" in r.stdout and "mfctl: testbed mfabric-prototype-mock-" in r.stdout
    assert _cases(root) == EXPECTED
    # what each test did is in the report: its slice of the OCS journal, its commands, the hosts' output
    circuit = next(tc for tc in root.iter("testcase") if tc.get("name") == "test_a_circuit_brings_both_lanes_up")
    props = {p.get("name"): p.get("value") for p in circuit.iter("property")}
    assert '"op":"ocs.intent"' in props["mfctl.ocs_journal"] and "ocs: ENT-PATCH::1&4,388&385" in props["mfctl.commands"]
    assert "---- gpu01: ip -j link show dev ens1f0np0 (rc=0" in circuit.find("system-out").text


def test_the_sample_suite_on_a_second_mock_standing_in_for_hardware(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "hardware", time_scale=100)
    try:
        r, root = _pytest_hil(tmp_path, cli_env, "--mfctl-inventory", st["inventory"])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert _cases(root) == EXPECTED and f"({st['inventory']})" in r.stdout
        assert mockctl.status(tmp_path / "hardware")["pid"] == st["pid"]  # the session used it, and left it running
    finally:
        mockctl.stop(tmp_path / "hardware")


def _schema():
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema (the test extra) validates against junit-10.xsd")
    return xmlschema.XMLSchema(XSD)


def test_health_and_run_junit_through_the_cli_are_valid(tmp_path, cli_env, monkeypatch):
    schema = _schema()
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100)
    try:
        h = tmp_path / "health.xml"
        r = subprocess.run(mfctl_cmd("health", "-i", st["inventory"], "--junit", h), capture_output=True, text=True,
                           env=cli_env, timeout=120)
        assert r.returncode == 0, r.stderr
        schema.validate(str(h))
        root = ET.parse(h).getroot()
        assert root.tag == "testsuite" and root.get("errors") == "0" and root.get("failures") == "0"
        assert int(root.get("tests")) == 4 * 5 + 1  # gpu, nic, rdma, optics, roce per host, and the OCS
        j = tmp_path / "run.xml"
        r = subprocess.run(mfctl_cmd("run", HIL / "short.yaml", "-i", st["inventory"], "--junit", j, "--json"),
                           capture_output=True, text=True, env=cli_env, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        summary = json.loads(r.stdout)
        schema.validate(str(j))
        run = ET.parse(j).getroot()
        names = [tc.get("name") for tc in run.iter("testcase") if tc.get("classname") == "run"]
        assert names == ["health", "ocs.initial_topology", "launch", "train",
                         *(f"reconfiguration.epoch{x['epoch']}" for x in summary["reconfigurations"]), "ocs.final_readback"]
        assert {p.get("name"): p.get("value") for p in run.iter("property")}["run_id"] == summary["run_id"]
        assert run.get("errors") == run.get("failures") == "0"
        assert {tc.get("classname") for tc in run.iter("testcase")} == {"run", "gpu01", "gpu02", "gpu03", "gpu04"}
        # a run stopped by its health gate (every GPU above a 1 °C limit): the report says where it stopped
        hot = ("--threshold", "gpu_temp_warn_c=0.5", "--threshold", "gpu_temp_crit_c=1")
        r = subprocess.run(mfctl_cmd("run", HIL / "short.yaml", "-i", st["inventory"], "--junit", j, *hot),
                           capture_output=True, text=True, env=cli_env, timeout=300)
        assert r.returncode == 1 and "health sweep found" in r.stderr
        schema.validate(str(j))
        cases = _cases(ET.parse(j).getroot())
        assert cases["health"] == ["failure"] and cases["train"] == ["skipped"]
    finally:
        mockctl.stop(tmp_path / "mock")
