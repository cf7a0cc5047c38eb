"""Two regions on one OCS (``gen_scale.py --servers 8 --per-region 4 --ocses 1``, on the mock): a region's
plan (``mfctl topo plan -i INV --region R --json``) applied with ``mfctl ocs apply`` changes that region's
ports only — the other region's circuits on the same switch stay (they were deleted: the apply made the
switch hold exactly the file)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build
from support import ROOT


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from mfctl import mockctl

    d = tmp_path_factory.mktemp("shared")
    inv = d / "two-regions-one-ocs.yaml"
    subprocess.run([sys.executable, str(ROOT / "inventory" / "gen_scale.py"), "--servers", "8", "--per-region", "4",
                    "--ocses", "1", "--name", "two-regions-one-ocs", "-o", str(inv)], check=True, timeout=60)
    st = mockctl.start(inv, d / "mock", time_scale=100, sshd="paramiko", timeout=90)
    try:
        yield st["inventory"], d
    finally:
        mockctl.stop(d / "mock")


def _plan(inv, d, region, seed):
    B = np.random.default_rng(seed).gamma(0.5, 1e9, size=(4, 4))
    np.fill_diagonal(B, 0)
    np.save(d / f"{region}.npy", B)
    r = invoke("topo", "plan", d / f"{region}.npy", "-i", inv, "--region", region, "--json")
    assert r.exit_code == 0, r.output
    (d / f"{region}.json").write_text(r.stdout)
    doc = json.loads(r.stdout)
    assert doc["region"] == region and doc["cross_connects"]
    return d / f"{region}.json", sorted(map(list, doc["cross_connects"]))


def _held(inv):
    r = invoke("ocs", "show", "-i", inv, "--json")
    assert r.exit_code == 0, r.output
    return sorted([x["in"], x["out"]] if isinstance(x, dict) else list(x) for x in json.loads(r.stdout)["cross_connects"])


def test_a_regions_plan_changes_its_own_ports_only(shared, tmp_path):
    inv, d = shared
    p0, x0 = _plan(inv, d, "region0", 1)
    p1, x1 = _plan(inv, d, "region1", 2)
    assert not {p for xc in x0 for p in xc} & {p for xc in x1 for p in xc}  # the regions' ports are apart
    assert invoke("ocs", "apply", p0, "-i", inv, "--yes").exit_code == 0
    assert _held(inv) == x0
    r = invoke("ocs", "apply", p1, "-i", inv, "--yes", "--json")
    assert r.exit_code == 0, r.output
    assert _held(inv) == sorted(x0 + x1)  # region0's circuits are still there
    # a plan of region0 again, for other traffic: region1's stay
    p0b, x0b = _plan(inv, d, "region0", 3)
    assert invoke("ocs", "apply", p0b, "-i", inv, "--yes").exit_code == 0
    assert _held(inv) == sorted(x0b + x1)
    # a region the switch does not hold, and a cross-connect outside the region's lanes: refused at the file's line
    doc = json.loads(p1.read_text())
    doc["region"] = "region7"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, indent=2))
    r = invoke("ocs", "apply", bad, "-i", inv, "--yes", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 3 and "this plan is for region 'region7', which OCS" in err["message"] and err["problems"][0]["line"]
    doc["region"] = ["region0"]  # not a name: the same error, not a traceback
    bad.write_text(json.dumps(doc, indent=2))
    r = invoke("ocs", "apply", bad, "-i", inv, "--yes", "--json")
    assert r.exit_code == 3 and "this plan is for region ['region0'], which OCS" in json.loads(r.stdout)["error"]["message"]
    doc["region"] = "region0"  # region1's cross-connects under region0's name
    bad.write_text(json.dumps(doc, indent=2))
    r = invoke("ocs", "apply", bad, "-i", inv, "--yes", "--json")
    assert r.exit_code == 3 and "outside the region's lanes" in json.loads(r.stdout)["error"]["message"]
    assert _held(inv) == sorted(x0b + x1)  # nothing changed
    assert invoke("ocs", "disconnect", "--all", "-i", inv, "--yes").exit_code == 0
