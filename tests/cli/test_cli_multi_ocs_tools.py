"""Issue 22: the tools beyond ``mfctl ocs`` on a testbed of several OCSes (inventory/mfabric-2ocs.yaml
on the mock: two regions, each on its own switch, both on ports 1..12) — ``provision optics`` reads
each OCS for its own regions' lanes (the same port numbers on the other switch are other lanes)."""

import json
import subprocess
import time

import pytest

from mfctl import mockctl
from support import ROOT, mfctl_cmd, wait_until

TWO = ROOT / "inventory" / "mfabric-2ocs.yaml"
SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.fixture(scope="module")
def two_ocs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mock2")
    st = mockctl.start(TWO, d / "mock", time_scale=100, sshd="paramiko", timeout=90)
    try:
        yield st
    finally:
        mockctl.stop(d / "mock")


def test_provision_optics_checks_each_ocs_against_its_own_regions_lanes(two_ocs, cli_env):
    inv = two_ocs["inventory"]
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=120)  # noqa: E731
    for ocs, a, b in (("ocs-a", "gpu01/nic0", "gpu02/nic0"), ("ocs-b", "gpu05/nic1", "gpu07/nic1")):
        r = run("ocs", "connect", a, b, "-i", inv, "--ocs", ocs, "--yes")
        assert r.returncode == 0, r.stderr[-2000:]
    try:
        time.sleep(0.5)  # link-up: ~6 testbed s = 60 ms at time scale 100
        r = run("provision", "optics", SPEC, "-i", inv, "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        lit = sorted((x["ocs"], x["host"], x["lane"], x["status"]) for x in doc["lanes"] if x["status"] != "no circuit")
        # gpu05/nic0 is on ports 1/193 too, like gpu01/nic0: on ocs-b those have no circuit
        assert lit == [("ocs-a", "gpu01", "nic0.0", "ok"), ("ocs-a", "gpu02", "nic0.0", "ok"),
                       ("ocs-b", "gpu05", "nic1.0", "ok"), ("ocs-b", "gpu07", "nic1.0", "ok")], doc["lanes"]
        assert doc["checked"] == 4 and doc["bad"] == 0 and doc["ocses"] == ["ocs-a", "ocs-b"]
        assert len(doc["lanes"]) == 24 and {x["ocs"] for x in doc["lanes"] if x["host"] == "gpu05"} == {"ocs-b"}
        r = run("provision", "optics", SPEC, "-i", inv, "--ocs", "ocs-b", "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 0 and doc["ocses"] == ["ocs-b"] and doc["checked"] == 2, r.stdout[-2000:]
        assert {x["host"] for x in doc["lanes"]} == {"gpu05", "gpu06", "gpu07", "gpu08"}
        r = run("provision", "optics", SPEC, "-i", inv, "--ocs", "ocs-a", "--ocs", "ocs-b")
        assert r.returncode == 2 and "given 2 times ('ocs-a', 'ocs-b')" in r.stderr
    finally:
        for ocs in ("ocs-a", "ocs-b"):
            run("ocs", "disconnect", "--all", "-i", inv, "--ocs", ocs, "--yes")


def test_provision_check_measures_each_ocs_circuits_among_its_own_regions_lanes(two_ocs, cli_env):
    """The same ports (input 1 → output 196) on both switches: gpu01→gpu02 on ocs-a, gpu05→gpu06 on
    ocs-b. Each path is measured between the lanes its own switch joins (read as one OCS, ocs-b's
    circuit was a path gpu01→gpu06) — by ``provision apply --check`` (which puts the recipe's lane
    addresses on, the mock's only drift) and by ``provision check``."""
    inv = two_ocs["inventory"]
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=120)  # noqa: E731
    for ocs, a, b in (("ocs-a", "gpu01/nic0", "gpu02/nic0"), ("ocs-b", "gpu05/nic0", "gpu06/nic0")):
        r = run("ocs", "connect", a, b, "-i", inv, "--ocs", ocs, "--yes")
        assert r.returncode == 0, r.stderr[-2000:]
    hosts = "gpu[01-02],gpu[05-06]"
    want = [("EPS", None, "gpu01/nic3.0 (ens4f0np0)", "gpu02/nic3.0 (ens4f0np0)"),
            ("EPS", None, "gpu02/nic3.0 (ens4f0np0)", "gpu05/nic3.0 (ens4f0np0)"),
            ("EPS", None, "gpu05/nic3.0 (ens4f0np0)", "gpu06/nic3.0 (ens4f0np0)"),
            ("OCS ocs-a 1→196", "ocs-a", "gpu01/nic0.0 (ens1f0np0)", "gpu02/nic0.0 (ens1f0np0)"),
            ("OCS ocs-b 1→196", "ocs-b", "gpu05/nic0.0 (ens1f0np0)", "gpu06/nic0.0 (ens1f0np0)")]
    try:
        # (a second apply has nothing left to change and checks again: retried until the circuits' links are up)
        r = wait_until(lambda: (x := run("provision", "apply", SPEC, "-i", inv, "--hosts", hosts, "--yes", "--check",
                                         "--json")).returncode == 0 and x, timeout=60, what="apply --check: every check ok")
        doc = json.loads(r.stdout)
        assert doc["ok"] and doc["verified"] and sorted({(x["path"], x.get("ocs"), x["src"], x["dst"])
                                                          for x in doc["checks"]}) == want
        r = run("provision", "check", SPEC, "-i", inv, "--hosts", hosts, "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert sorted({(x["path"], x.get("ocs"), x["src"], x["dst"]) for x in doc["checks"]}) == want
        rows = {(x["path"], x["check"]): x for x in doc["checks"]}
        for ocs in ("ocs-a", "ocs-b"):
            bw = rows[(f"OCS {ocs} 1→196", "ib_write_bw")]
            assert bw["measured"] == 94.21 and bw["status"] == "ok", bw
            assert rows[(f"OCS {ocs} 1→196", "rx_prio3_bytes")]["status"] == "ok"
        assert doc["bad"] == 0 and doc["checked"] == 20
        # a host set on one switch: that switch's circuit only
        doc = json.loads(run("provision", "check", SPEC, "-i", inv, "--hosts", "gpu[05-06]", "--json").stdout)
        assert sorted({x["path"] for x in doc["checks"]}) == ["EPS", "OCS ocs-b 1→196"]
    finally:
        for ocs in ("ocs-a", "ocs-b"):
            run("ocs", "disconnect", "--all", "-i", inv, "--ocs", ocs, "--yes")
