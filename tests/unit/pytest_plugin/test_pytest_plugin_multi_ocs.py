"""Issue 22: mfctl's pytest plugin on a testbed of several OCSes — the mock of
inventory/mfabric-2ocs.yaml (two regions of 4 servers, each on a switch of its own, both on ports
1..12 / 193..204): ``ocs["NAME"]`` for each OCS, the marker's ``ocs=`` for the test's own, circuits
put on the OCS of their lanes, the gate reading every OCS and naming the one a test left changed,
the runner putting every OCS back after a real run."""

import json
import os
import xml.etree.ElementTree as ET

import pytest

import mfctl.health  # noqa: F401  (imported here: pytester's in-process runs put sys.modules back after each, and
import mfctl.ocs.driver  # noqa: F401  numpy, which these import, cannot be loaded twice in one process)
import mfctl.ocs.service  # noqa: F401
import mfctl.pytest_plugin.handles  # noqa: F401
import mfctl.pytest_plugin.session  # noqa: F401
from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.ocs.service import PortMap
from mfctl.pytest_plugin import gate
from mfctl.pytest_plugin.gate import Snapshot
from support import ROOT

pytest_plugins = ["pytester"]

TWO = ROOT / "inventory" / "mfabric-2ocs.yaml"


@pytest.fixture(scope="module")
def two_ocs_inv(tmp_path_factory):
    """One 2-OCS mock for the module's inner sessions (each given it with --mfctl-inventory)."""
    d = tmp_path_factory.mktemp("hil-2ocs")
    env = {"MFCTL_STATE_DIR": str(d / "state")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        st = mockctl.start(TWO, d / "mock", time_scale=100, sshd="paramiko", timeout=90)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    yield st["inventory"]
    mockctl.stop(d / "mock")


def test_each_ocs_by_name_the_markers_ocs_and_circuits_on_the_ocs_of_their_lanes(pytester, two_ocs_inv):
    pytester.makepyfile(test_two="""
        import pytest

        from mfctl.errors import UsageError

        pytestmark = pytest.mark.mfctl(health="links")

        def test_both(ocs, topology):
            assert ocs.names == ["ocs-a", "ocs-b"] and len(ocs) == 2 and "ocs-b" in ocs and list(ocs) == ocs.names
            assert ocs.cross_connects_all() == {"ocs-a": {}, "ocs-b": {}}
            # the same ports on both switches: each circuit goes to the OCS of its lanes
            held = topology(circuits=[("gpu01/nic0", "gpu02/nic0"), ("gpu05/nic0", "gpu06/nic0")])
            assert held == {"ocs-a": {1: 196, 4: 193}, "ocs-b": {1: 196, 4: 193}}
            assert ocs["ocs-b"].cross_connects() == {1: 196, 4: 193}
            assert ocs["ocs-b"].ports.name(196) == "gpu06/nic0.0 rx"
            with pytest.raises(UsageError, match=r"the testbed has 2 OCSes \\(ocs-a, ocs-b\\): use ocs\\[NAME\\]"):
                ocs.cross_connects()
            with pytest.raises(UsageError, match="gpu01/nic0 is on OCS ocs-a, gpu05/nic1 on OCS ocs-b"):
                topology(circuits=[("gpu01/nic0", "gpu05/nic1")])
            with pytest.raises(KeyError, match="no OCS 'ocs-c' on this testbed"):
                ocs["ocs-c"]
            # one OCS by name: a plain cross-connect map goes to it
            assert topology(cross_connects={2: 197}, replace=False, ocs="ocs-a") == {1: 196, 4: 193, 2: 197}
            ocs["ocs-a"].verify({1: 196, 4: 193, 2: 197})
            recs = [r for r in ocs.journal() if r["op"] == "ocs.intent"]
            assert sorted((r["ocs"], r["reason"]) for r in recs) == [("ocs-a", "pytest topology")] * 2 + [
                ("ocs-b", "pytest topology")]

        def test_both_put_back(ocs):
            assert ocs.cross_connects_all() == {"ocs-a": {}, "ocs-b": {}}

        @pytest.mark.mfctl(ocs="ocs-b", circuits=[("gpu07/nic2", "gpu08/nic2")])
        def test_marker_names_the_tests_ocs(ocs):
            assert ocs.name == "ocs-b" and ocs.cross_connects() == {9: 204, 12: 201}
            assert ocs["ocs-a"].cross_connects() == {}

        @pytest.mark.mfctl(ocs="ocs-z")
        def test_unknown_ocs(ocs):
            pass
    """)
    r = pytester.runpytest("--mfctl-inventory", two_ocs_inv, "--junitxml=report.xml", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=3, errors=1)
    assert "mfctl: @pytest.mark.mfctl(ocs=...): no OCS 'ocs-z' in inventory mfabric-2ocs-mock-" in r.stdout.str()
    cases = {tc.get("name"): tc for tc in ET.parse(pytester.path / "report.xml").getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_both"].iter("property")}
    journal = json.loads(props["mfctl.ocs_journal"])  # both device journals' slices: apply, then restore, per OCS
    intents = sorted((r["ocs"], r["reason"]) for r in journal if r["op"] == "ocs.intent")
    assert intents == [("ocs-a", "pytest topology")] * 2 + [("ocs-a", "pytest topology restore"),
                                                             ("ocs-b", "pytest topology"), ("ocs-b", "pytest topology restore")]
    assert "ocs/ocs-a: ENT-PATCH::1&4,196&193" in props["mfctl.commands"]
    assert "ocs/ocs-b: ENT-PATCH::1&4,196&193" in props["mfctl.commands"]


def test_the_gate_reads_every_ocs_and_names_the_one_a_test_left_changed(pytester, two_ocs_inv):
    pytester.makepyfile(test_breaks="""
        import pytest

        pytestmark = pytest.mark.mfctl(health="links")

        def test_leaves_a_circuit_on_ocs_b(ocs):
            ocs["ocs-b"].apply({2: 197})

        @pytest.mark.mfctl(ocs="ocs-b")
        def test_finds_it_and_clears_it_with_the_gate_off(ocs):
            assert ocs.cross_connects() == {2: 197}
    """)
    r = pytester.runpytest("--mfctl-inventory", two_ocs_inv, "-p", "no:cacheprovider", "-k", "leaves")
    r.assert_outcomes(passed=1, errors=1)
    msg = ("mfctl: this test broke the testbed: the OCS ocs-b differs from what the test found: 0 cross-connect(s) "
           "removed, 1 added: + 2->197 (gpu05/nic1.0 tx -> gpu06/nic1.0 rx)")
    assert msg in r.stdout.str()
    assert "the OCS ocs-a differs" not in r.stdout.str()
    pytester.makepyfile(test_clear="""
        def test_clear(ocs):
            assert ocs.cross_connects_all() == {"ocs-a": {}, "ocs-b": {2: 197}}
            ocs["ocs-b"].apply({})
    """)
    pytester.runpytest("--mfctl-inventory", two_ocs_inv, "--mfctl-health", "off", "-p", "no:cacheprovider",
                       "test_clear.py").assert_outcomes(passed=1)


def test_changes_name_each_ocs_by_its_own_lanes():
    inv = load_inventory(TWO)
    ports = {o.name: PortMap.from_inventory(inv, o.name) for o in inv.ocses}
    before = Snapshot({}, None, [], [], {"ocs-a": {1: 196}, "ocs-b": {1: 196}})
    after = Snapshot({}, None, [], [], {"ocs-a": {1: 196}, "ocs-b": {}})
    assert gate.changes(before, after, ports) == [
        "the OCS ocs-b differs from what the test found: 1 cross-connect(s) removed, 0 added: - 1->196 "
        "(gpu05/nic0.0 tx -> gpu06/nic0.0 rx)"]
    assert gate.changes(before, before, ports) == []


def test_the_runner_puts_every_ocs_back_after_a_real_run(pytester, two_ocs_inv):
    pb = pytester.path / "two.yaml"
    pb.write_text((ROOT / "examples" / "hil" / "short.yaml").read_text()
                  .replace("name: hil-short", "name: hil-two-ocs")
                  .replace("inventory: ../../inventory/mfabric-prototype.yaml", f"inventory: {TWO}"))
    pytester.makepyfile(test_run=f"""
        import json

        def test_run(runner, topology, ocs):
            topology(circuits=[("gpu01/nic0", "gpu02/nic0"), ("gpu07/nic1", "gpu08/nic1")])
            before = ocs.cross_connects_all()
            s = runner({str(pb)!r}, iterations=4, skip_health=True)
            assert s["exit_code"] == 0 and s["status"] == "ok", (s.get("error"), s.get("warnings"))
            print("BYOCS", json.dumps(s["ocs"]["by_ocs"]))
            assert ocs.cross_connects_all() == before == {{"ocs-a": {{1: 196, 4: 193}}, "ocs-b": {{8: 203, 11: 200}}}}
    """)
    r = pytester.runpytest("--mfctl-inventory", two_ocs_inv, "--mfctl-health", "off", "-p", "no:cacheprovider", "-s")
    r.assert_outcomes(passed=1)
    by = json.loads(next(ln.split(" ", 1)[1] for ln in r.stdout.lines if ln.startswith("BYOCS")))
    # the run left its own topology on both switches (read back, as planned): what the runner put back
    assert sorted(by) == ["ocs-a", "ocs-b"] and all(by[n]["matches_last_plan"] for n in by)
    assert dict(map(tuple, by["ocs-a"]["cross_connects"])) != {1: 196, 4: 193}
    assert dict(map(tuple, by["ocs-b"]["cross_connects"])) != {8: 203, 11: 200}
