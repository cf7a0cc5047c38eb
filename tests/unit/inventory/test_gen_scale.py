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


def test_every_host_and_ocs_of_a_large_cluster_has_a_valid_address_of_its_own():
    """Past 189 hosts the generator wrote 192.0.2.256 and up (not an address: the 32,768-GPU inventory
    failed to validate), and hosts 190-244 took the OCSes' 192.0.2.200-254."""
    import ipaddress

    spec = importlib.util.spec_from_file_location("gen_scale", GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    doc = gen.inventory(4096, 8, 64, "big")  # (64 OCSes of 192x192: the paper's alpha would need them too)
    hosts = [h["ssh"]["address"] for h in doc["hosts"]]
    ocses = [o["transports"][0]["address"] for o in doc["ocs"]]
    every = [ipaddress.ip_address(a) for a in hosts + ocses]  # ValueError for a bad one
    assert len(set(every)) == 4096 + 64
    assert hosts[:3] == ["192.0.2.11", "192.0.2.12", "192.0.2.13"] and hosts[188] == "192.0.2.199"
    assert hosts[189] == "198.51.100.1" and hosts[443] == "203.0.113.1" and hosts[697] == "2001:db8::2ba"
    assert ocses[0] == "192.0.2.200" and ocses[54] == "192.0.2.254" and ocses[55] == "2001:db8:0:1::38"
