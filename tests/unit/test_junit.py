"""JUnit XML that CI systems read: valid against junit-10.xsd (the Jenkins xUnit plugin's, in
tests/data/junit/), and host output's control characters (the ANSI escapes of a real nvidia-smi
capture) neither break any reader nor reach the terminal raw."""

import io
import sys
import xml.etree.ElementTree as ET

import pytest

from mfctl import health, junit
from mfctl.inventory import load_inventory
from mfctl.transport.ssh import CommandResult, SSHPool
from support import DATA, PROTOTYPE

XSD = DATA / "junit" / "junit-10.xsd"
ANSI = (DATA / "nvidia-smi" / "h100-topo-m-ansi-single-gpu-drv590.txt").read_text()  # ESC [4m ... ESC [0m


def _schema():
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema (the test extra) validates against junit-10.xsd")
    return xmlschema.XMLSchema(XSD)


def _read_everywhere(text: str) -> ET.Element:
    """``text`` read by every consumer CI uses: the XSD, ElementTree, lxml and junitparser."""
    _schema().validate(text)  # raises with the first violation
    root = ET.fromstring(text)
    lxml = pytest.importorskip("lxml.etree", reason="lxml reads the report as libxml2-based CI tools do")
    lxml.fromstring(text.encode())
    junitparser = pytest.importorskip("junitparser", reason="junitparser reads the report as Python CI tools do")
    jx = junitparser.JUnitXml.fromstring(text)
    cases = list(jx) if isinstance(jx, junitparser.TestSuite) else [c for s in jx for c in s]
    assert [c.name for c in cases] == [tc.get("name") for tc in root.iter("testcase")]
    return root


class Answers:
    """A stand-in pool: nvidia-smi fails with the capture's escapes on stderr; the rest is not there."""

    fanout = 4
    map = SSHPool.map

    def run(self, host, argv, **_):
        if argv[0] == "nvidia-smi":
            return CommandResult(host, list(argv), rc=9, stderr=ANSI)
        return CommandResult(host, list(argv), rc=127, stderr=f"{argv[0]}: command not found")


def test_an_ansi_escape_in_host_output_is_shown_in_the_xml_and_the_table_never_sent_raw(monkeypatch):
    rep = health.sweep(Answers(), load_inventory(PROTOTYPE), ["gpu01"], checks=["gpu"])
    [f] = rep.findings
    assert "\x1b[4m" in f.message  # the finding keeps what the host said (the --json document too)
    text = rep.junit()
    assert "\x1b" not in text and "\\x1b[4mGPU0" in text
    root = _read_everywhere(text)
    [tc] = root.iter("testcase")
    assert (tc.get("classname"), tc.get("name")) == ("gpu01", "gpu")
    assert tc.find("failure").get("message").startswith("nvidia-smi exited 9: \\x1b[4mGPU0\tCPU Affinity")
    assert root.get("errors") == "0" and root.get("failures") == "1" and root.get("tests") == "1"
    # the terminal's table: the same rule, at the console (mfctl.cli.plain.visible)
    from mfctl.cli.health import _render

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    _render(rep)
    assert "\x1b" not in out.getvalue() and "\\x1b[4mGPU0" in out.getvalue()


def test_every_suite_has_the_attributes_the_schema_requires():
    s = junit.Suite("s", [junit.Case("a"), junit.Case("b", outcome="failure", message="m", detail="d\x00e"),
                          junit.Case("c", outcome="error", message="boom"), junit.Case("d", outcome="skipped", message="x"),
                          junit.Case("e", system_out="out \x07", system_err="err", properties={"k": "v\x1b"})],
                    properties={"run_id": "r1"})
    root = _read_everywhere(junit.document([s]))
    assert root.tag == "testsuite"
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5", "failures": "1", "errors": "1", "skipped": "1"}
    e = root.find("testcase[@name='e']")
    assert e.find("system-out").text == "k: v\\x1b\nout \\x07"
    two = _read_everywhere(junit.document([s, junit.Suite("t", [junit.Case("z", time=1.25)])], name="two"))
    assert two.tag == "testsuites" and (two.get("tests"), two.get("errors"), two.get("failures")) == ("6", "1", "1")
    assert [x.get("errors") for x in two] == ["1", "0"] and two.find("testsuite[@name='t']").get("time") == "1.250"
    # an unpaired surrogate or U+FFFF is no XML character either
    assert "\\ud800" in junit.document([junit.Suite("u", [junit.Case("x\ud800\uffff")])])


def test_the_old_report_is_invalid_and_says_why():
    """What mfctl health wrote before: no ``errors`` on its testsuite, which junit-10.xsd requires."""
    schema = _schema()
    old = ('<testsuite name="mfctl-health" tests="1" failures="0" skipped="0">'
           '<testcase classname="gpu01" name="gpu" /></testsuite>')
    assert not schema.is_valid(old)
    assert "errors" in str(next(schema.iter_errors(old)))


def _summary(**kw):
    base = {"schema": "mfctl.run.summary/v1", "run_id": "r1", "status": "ok", "error": None, "playbook": "short",
            "inventory": "mock", "run_dir": "/x", "iterations": 12, "iterations_planned": 12, "wall_train_s": 3.5,
            "health": {"hosts": 4, "ok": 4, "sweep_s": 0.8},
            "initial_topology": {"apply": {"verified": True}, "linkup_ms": 5670.0},
            "ocs": {"matches_last_plan": True, "cross_connects": [[1, 400]]},
            "reconfigurations": [{"epoch": 1, "region": "region0", "iteration": 4, "xc_added": 2, "xc_removed": 2,
                                  "t_switch_ms": 42.0, "t_linkup_ms": 5670.0, "t_runtime_ms": 120.0, "outcome": "applied"}]}
    return base | kw


def _cases(root):
    return [(tc.get("name"), next((c.tag for c in tc if c.tag in ("failure", "error", "skipped")), "passed"))
            for tc in root.iter("testcase")]


def test_a_run_as_test_cases_phases_reconfigurations_and_the_first_phase_that_broke():
    root = _read_everywhere(junit.document([junit.run_suite(_summary())]))
    assert _cases(root) == [("health", "passed"), ("ocs.initial_topology", "passed"), ("launch", "passed"),
                            ("train", "passed"), ("reconfiguration.epoch1", "passed"), ("ocs.final_readback", "passed")]
    assert root.find("testcase[@name='reconfiguration.epoch1']").get("time") == "5.832"
    assert root.find("properties/property[@name='run_id']").get("value") == "r1"
    # the cases overlap (reconfigurations inside train): the suite is the run's wall time from its start
    import time

    t0 = time.mktime((2026, 12, 1, 21, 18, 1, 0, 0, -1))
    root = _read_everywhere(junit.document([junit.run_suite(_summary(), started=t0, wall_s=21.5)]))
    assert root.get("time") == "21.500" and root.get("timestamp") == "2026-12-01T21:18:01"
    # the health gate stopped it: health is the failure, the rest not reached
    gate = _summary(status="failed", error="health sweep found 1 critical problem(s): gpu02: GPU 3 XID 79",
                    initial_topology={"apply": None}, iterations=0, ocs=None, reconfigurations=[])
    root = _read_everywhere(junit.document([junit.run_suite(gate)]))
    assert _cases(root) == [("health", "failure"), ("ocs.initial_topology", "skipped"), ("launch", "skipped"),
                            ("train", "skipped"), ("ocs.final_readback", "skipped")]
    assert root.find("testcase/failure").get("message").endswith("GPU 3 XID 79")
    # a runtime that died mid-training, a reconfiguration that failed, an OCS that differs at the end
    mid = _summary(status="failed", error="gpu03: the runtime exited 1", iterations=5,
                   ocs={"matches_last_plan": False, "cross_connects": []},
                   reconfigurations=[{"epoch": 1, "outcome": "failed", "error": "ENT-PATCH denied (SROF)"}])
    root = _read_everywhere(junit.document([junit.run_suite(mid)]))
    assert _cases(root) == [("health", "passed"), ("ocs.initial_topology", "passed"), ("launch", "passed"),
                            ("train", "error"), ("reconfiguration.epoch1", "failure"), ("ocs.final_readback", "skipped")]
    assert root.get("errors") == "1" and root.get("failures") == "1"
