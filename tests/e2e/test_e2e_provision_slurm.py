"""Issue 16 item 14 against a REAL Slurm 22.05 cluster (tests/peers_slurm.py, a cluster of this
module's own: it drains nodes): ``mfctl provision apply`` drains each node before its NIC reset
through ``scontrol`` on the inventory's login host (a real OpenSSH sshd with the cluster's
SLURM_CONF), waits while a job still runs there (MIXED+DRAIN) until it is IDLE+DRAIN, and resumes
it after verify; a node someone else drained is waited for, never resumed. The GPU hosts are a
factory mock of the test's own. Skips where root, Slurm, munge or sshd are missing."""

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from peers_slurm import login_node

from mfctl import mockctl
from mfctl.mock import openssh
from mfctl.provision.rollout import parse_scontrol_node
from support import PROTOTYPE, ROOT, mfctl_cmd, wait_until

SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.fixture
def site(real_slurm, tmp_path, cli_env):
    if openssh.unavailable_reason():
        pytest.skip(openssh.unavailable_reason())
    cluster = real_slurm(False, "provision")
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=True)
    try:
        inv = yaml.safe_load(Path(st["inventory"]).read_text())
        key_file = inv["hosts"][0]["ssh"]["key_file"]
        pub = subprocess.run(["ssh-keygen", "-y", "-f", key_file], capture_output=True, text=True, check=True,
                             timeout=10).stdout
        sshd = login_node(cluster, tmp_path / "sshd", [pub])
        try:
            kh = tmp_path / "known_hosts"
            kh.write_text(Path(inv["ssh"]["known_hosts"]).read_text() + sshd.known_hosts_line("ecdsa") + "\n")
            inv["ssh"]["known_hosts"] = str(kh)
            inv["login_hosts"] = [{"name": "login", "description": "Slurm login node (real sshd)",
                                   "ssh": {"address": "127.0.0.1", "port": sshd.port, "user": "root",
                                           "key_file": key_file, "agent": False}}]
            p = tmp_path / "inventory.yaml"
            p.write_text(yaml.safe_dump(inv))
            yield cluster, str(p), {**cli_env, "MFCTL_DRAIN_TIMEOUT": "90"}
        finally:
            sshd.close()
            for n in ("gpu01", "gpu02"):  # leave the cluster as found
                cluster.run("scontrol", "update", f"nodename={n}", "state=resume")
    finally:
        mockctl.stop(tmp_path / "mock")


def _node(cluster, name) -> dict:
    return parse_scontrol_node(cluster.run("scontrol", "-o", "show", "node", name, check=True).stdout)


def test_real_slurm_drain_waits_for_the_job_and_resumes_only_its_own(site, tmp_path):
    cluster, inv, env = site
    job = cluster.run("sbatch", "--parsable", "-p", "gpu", "-w", "gpu01", "-N1", "-o", str(tmp_path / "o-%j"),
                      "--wrap", "sleep 300", check=True).stdout.strip()
    wait_until(lambda: "JobState=RUNNING" in cluster.run("scontrol", "-o", "show", "job", job).stdout, timeout=30,
               what="the job running on gpu01")
    cluster.run("scontrol", "update", "nodename=gpu02", "state=drain", "reason=bad DIMM", check=True)
    seen: list[str] = []

    def end_the_job_once_drained():  # the job ends only once mfctl's drain is in place: apply must wait for it
        wait_until(lambda: "DRAIN" in (st := _node(cluster, "gpu01")["State"]) and not seen.append(st), timeout=200,
                   interval=0.2, what="gpu01 draining")
        time.sleep(2)
        cluster.run("scancel", job, check=True)

    t = threading.Thread(target=end_the_job_once_drained, daemon=True)
    t.start()
    r = subprocess.run(mfctl_cmd("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu01,gpu02", "--yes", "--json"),
                       capture_output=True, text=True, env=env, timeout=240)
    t.join(10)
    assert r.returncode == 0, r.stdout + r.stderr
    assert seen[-1] == "MIXED+DRAIN"  # drained while the job ran: draining, not drained
    doc = json.loads(r.stdout)
    h = {x["host"]: x for x in doc["hosts"]}
    assert h["gpu01"]["verified"] and h["gpu02"]["verified"]
    n1 = h["gpu01"]["notes"]
    assert n1[0] == f"gpu01 drained in Slurm (mfctl provision {doc['run']}: NIC firmware reset)"
    waited = [n for n in n1 if n.startswith("gpu01: waited ")]
    assert len(waited) == 1 and "(MIXED+DRAIN → " in waited[0] and waited[0].endswith(" → IDLE+DRAIN)"), n1
    assert n1[-1] == "gpu01 resumed in Slurm"
    assert h["gpu02"]["notes"] == ["gpu02 was already drained by someone else (bad DIMM): it stays drained"]
    assert "JobState=CANCELLED" in cluster.run("scontrol", "-o", "show", "job", job).stdout
    # (+NOT_RESPONDING: slurmd on a loaded 2-core machine missed a ping; the drain flag is the point)
    assert _node(cluster, "gpu01")["State"].split("+")[0] == "IDLE" and "DRAIN" not in _node(cluster, "gpu01")["State"]
    n2 = _node(cluster, "gpu02")
    assert n2["State"].replace("+NOT_RESPONDING", "") == "IDLE+DRAIN" and n2["Reason"].startswith("bad DIMM [root@")
    # the journal: gpu01's first NIC reset started only after the drain was done (the job had ended)
    recs = json.loads(subprocess.run(mfctl_cmd("provision", "journal", SPEC, "-i", inv, "--run", doc["run"], "--json"),
                                     capture_output=True, text=True, env=env, timeout=60).stdout)["records"]
    drained = next(x["ts"] for x in recs if x["op"] == "provision.drain" and x["host"] == "gpu01")
    reset = next(x["ts"] for x in recs if x["op"] == "provision.action" and x["host"] == "gpu01"
                 and x.get("phase") == "firmware-reset")
    assert drained < reset
