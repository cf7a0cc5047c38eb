"""Issue 16 items 14-16 through the CLI on a factory mock of its own: a canary and rolling batches
stop at the first failed batch (the rest untouched, said so), the NIC that carries the management
path is refused unless --allow-mgmt-reset, Slurm nodes are drained through the inventory's login
host and resumed after verify (never one someone else drained), ``provision check`` measures each
circuit and EPS path, and ``provision optics`` with no circuit is "nothing checked" (exit 6)."""

import json
import subprocess

import pytest
import yaml

from mfctl import mockctl
from support import PROTOTYPE, ROOT, mfctl_cmd, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.fixture
def mock_inv(tmp_path, cli_env, monkeypatch):
    """A factory mock; its inventory with gpu02's management interface on its nic0 and a login host
    (gpu04's sshd standing for the Slurm login node: every mock host answers the mock Slurm's scontrol)."""
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=True)
    d = yaml.safe_load(open(st["inventory"]))
    d["hosts"][1]["mgmt_netdev"] = "ens1f0np0"
    d["login_hosts"] = [{"name": "login", "ssh": dict(d["hosts"][3]["ssh"])}]
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(d))
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=180)  # noqa: E731
    yield str(p), run
    mockctl.stop(tmp_path / "mock")


def _node(run, inv, node):
    r = run("exec", "-i", inv, "gpu04", "--", "scontrol", "-o", "show", "node", node)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.timeout(300)  # three applies on a factory mock: ~40 s alone, more beside a loaded suite
def test_canary_then_batches_stop_at_the_failed_batch_and_drain_resume_through_slurm(mock_inv):
    inv, run = mock_inv
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu[01-02],gpu04", "--canary", "--batch", "1", "--yes",
            "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    h = {x["host"]: x for x in doc["hosts"]}
    assert h["gpu01"]["ok"] and h["gpu01"]["verified"]
    assert h["gpu02"]["failed"]["step"] == "management NIC guard" and h["gpu02"]["applied"] == []
    assert h["gpu02"]["failed"]["error"] == (
        "gpu02: nic0 (0000:0c:00.0) carries the management interface ens1f0np0: its reset would cut the host off "
        "(--allow-mgmt-reset to reset it anyway); nothing was changed on this host")
    assert h["gpu04"]["skipped"] == "not started: batch 2 of 3 failed (gpu02)" and h["gpu04"]["applied"] == []
    rid = doc["run"]
    assert h["gpu01"]["notes"] == [f"gpu01 drained in Slurm (mfctl provision {rid}: NIC firmware reset)",
                                   "gpu01 resumed in Slurm"]
    assert "State=IDLE " in _node(run, inv, "gpu01") and "Reason=" not in _node(run, inv, "gpu01")
    # gpu04 untouched, gpu02 still all to do
    left = json.loads(run("provision", "plan", SPEC, "-i", inv, "--json", "--hosts", "gpu[02-04]!gpu03").stdout)
    assert [x["host"] for x in left["hosts"]] == ["gpu02", "gpu04"] and all(len(x["actions"]) > 20 for x in left["hosts"])
    # someone else's drain stays; --allow-mgmt-reset resets the management NIC
    r = run("exec", "-i", inv, "gpu04", "--", "scontrol", "update", "nodename=gpu02", "state=drain", "reason=bad DIMM")
    assert r.returncode == 0, r.stderr
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu02", "--allow-mgmt-reset", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpu02: " in r.stdout and ", verified" in r.stdout
    assert "gpu02 was already drained by someone else (bad DIMM): it stays drained" in r.stdout
    assert "State=IDLE+DRAIN" in _node(run, inv, "gpu02") and "Reason=bad DIMM [" in _node(run, inv, "gpu02")
    # the end-to-end check over one circuit and the EPS path between gpu01 and gpu02
    topo = inv + ".c.yaml"
    open(topo, "w").write("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n")
    assert run("ocs", "apply", topo, "-i", inv, "--yes").returncode == 0
    c = wait_until(lambda: (x := run("provision", "check", SPEC, "-i", inv, "--hosts", "gpu[01-02]", "--json")).returncode == 0
                   and json.loads(x.stdout), what="the circuit up and every check ok")
    rows = {(x["path"], x["check"]): x for x in c["checks"]}
    assert rows[("OCS 1→388", "ib_write_bw")]["measured"] == 94.21 and rows[("EPS", "ib_write_bw")]["measured"] == 94.21
    assert rows[("OCS 1→388", "RoCE v2 GID (dst)")]["measured"] == "mlx5_0 index 3"
    assert rows[("OCS 1→388", "rx_prio3_bytes")]["status"] == "ok" and c["bad"] == 0 and c["checked"] == 8


def test_optics_with_no_circuit_checked_nothing_and_check_finds_unprovisioned_paths(mock_inv):
    inv, run = mock_inv
    r = run("provision", "optics", SPEC, "-i", inv, "--hosts", "@region0", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 6 and doc["checked"] == 0 and {x["status"] for x in doc["lanes"]} == {"no circuit"}
    assert "no lane has a circuit: nothing was checked" in r.stderr
    assert run("provision", "optics", SPEC, "-i", inv, "--hosts", "gpu09").returncode == 2
    # factory hosts: no lane address, so no RoCE v2 GID for it: the paths are bad, nothing measured
    r = run("provision", "check", SPEC, "-i", inv, "--hosts", "gpu01,gpu02", "--json")
    c = json.loads(r.stdout)
    assert r.returncode == 1 and c["checks"][0]["why"].startswith("no RoCE v2 GID for 198.18.3.1 on ens4f0np0")
    assert {x["status"] for x in c["checks"] if x["check"] == "ib_write_bw"} == {"skipped"}
    # one host: no path at all, nothing was checked
    r = run("provision", "check", SPEC, "-i", inv, "--hosts", "gpu01", "--json")
    assert r.returncode == 6 and json.loads(r.stdout)["checks"] == []
