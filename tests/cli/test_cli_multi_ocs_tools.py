"""Issue 22: the tools beyond ``mfctl ocs`` on a testbed of several OCSes (inventory/mfabric-2ocs.yaml
on the mock: two regions, each on its own switch, both on ports 1..12) — ``provision optics`` reads
each OCS for its own regions' lanes (the same port numbers on the other switch are other lanes)."""

import json
import subprocess
import time

import pytest

from mfctl import mockctl
from support import ROOT, mfctl_cmd

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
