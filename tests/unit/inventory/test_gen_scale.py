"""inventory/gen_scale.py: the committed scale inventories are its output, valid, each region's
lanes on its own OCS's ports (issue 22)."""

import importlib.util
import subprocess
import sys

import pytest

from mfctl.inventory import load_inventory
from support import DATA

ROOT = DATA.parent.parent
GEN = ROOT / "inventory" / "gen_scale.py"


@pytest.mark.parametrize("name, servers, ocses", [("mfabric-1024", 128, 4), ("mfabric-256", 32, 2)])
def test_the_committed_inventory_is_the_generators_and_valid(tmp_path, name, servers, ocses):
    gen = subprocess.run([sys.executable, str(GEN), "--servers", str(servers), "--per-region", "8", "--ocses", str(ocses)],
                         check=True, timeout=60, capture_output=True, text=True).stdout
    committed = (ROOT / "inventory" / f"{name}.yaml").read_text()
    body = lambda text: text.split("\n", 2)[2]  # noqa: E731 (after the two comment lines: the -o path differs)
    assert body(gen) == body(committed)
    out = tmp_path / f"{name}.yaml"
    out.write_text(committed)
    inv = load_inventory(str(out))
    assert len(inv.hosts) == servers and sum(h.gpus.count for h in inv.hosts) == servers * 8
    assert len(inv.regions) == servers // 8 and len(inv.ocs_names) == ocses
    for r in inv.regions:  # every lane of a region on its OCS, within its size, both directions
        o = inv.ocs_named(r.ocs)
        for h in r.hosts:
            for _, lane in inv.host(h).ocs_lanes():
                assert 1 <= lane.ocs_tx <= o.size.inputs < lane.ocs_rx <= o.size.total


def test_regions_that_do_not_fit_are_refused():
    spec = importlib.util.spec_from_file_location("gen_scale", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(ValueError, match="whole regions"):
        mod.inventory(30, 8, 1, "x")
    with pytest.raises(ValueError, match="over 1,024 a side"):
        mod.inventory(4096, 8, 1, "x")  # 512 regions x 24 ports on one switch
    assert mod.inventory(4096, 8, 32, "x")["ocs"][0]["size"] == {"inputs": 384, "outputs": 384}  # docs/scale.md's example


@pytest.mark.parametrize("args, said", [(["--per-region", "0"], "argument --per-region: expected a whole number >= 1"),
                                        (["--servers", "0"], "argument --servers: expected a whole number >= 1"),
                                        (["--ocses", "x"], "argument --ocses: expected a whole number >= 1, got 'x'")])
def test_counts_below_one_are_usage_errors_not_tracebacks(args, said):
    r = subprocess.run([sys.executable, str(GEN), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr
