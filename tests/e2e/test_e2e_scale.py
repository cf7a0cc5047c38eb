"""End to end at scale (issue 22): the main job at 256 GPUs — 32 servers in 4 regions over 2 mock
OCSes (inventory/mfabric-256.yaml) — through the mock's Slurm with tasks packed 8 to a process
(playbooks/mixtral-slurm-256-mock.yaml), every region reconfigured in training, each on its own
OCS emulator. The 1,024-GPU run is benchmarks/scale.py's."""

from pathlib import Path

import pytest

from mfctl import mockctl
from mfctl.context import Context
from mfctl.inventory import load_inventory
from mfctl.ocs.identity import journal_path
from mfctl.ocs.journal import Journal
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from support import DATA

ROOT = DATA.parent.parent
PLAYBOOK = ROOT / "playbooks" / "mixtral-slurm-256-mock.yaml"


@pytest.fixture
def mock256(tmp_path):
    pb = load_playbook(str(PLAYBOOK))
    mock = mockctl.start(pb.inventory_path(), tmp_path / "mock", time_scale=pb.mock.time_scale, sshd="paramiko")
    try:
        yield pb, mock
    finally:
        mockctl.stop(tmp_path / "mock")


def test_256_gpus_reconfigure_every_region_on_its_own_ocs(tmp_path, mock256):
    pb, mock = mock256
    s = Job(pb, inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
    assert s["status"] == "ok", (s.get("error"), s.get("warnings"))
    assert s["iterations"] == 30 and s["launcher"] == "slurm"
    inv = load_inventory(mock["inventory"])
    regions = {r.name: r for r in inv.regions}
    assert len(regions) == 4 and {r.ocs for r in regions.values()} == {"ocs1", "ocs2"}
    applied: dict[str, list[dict]] = {}
    for rc in s["reconfigurations"]:
        assert rc["ocs"] == regions[rc["region"]].ocs  # the change went to the region's own switch
        if rc["outcome"] == "applied":
            applied.setdefault(rc["region"], []).append(rc)
    assert set(applied) == set(regions), [(r["region"], r["outcome"], r["error"]) for r in s["reconfigurations"]]
    # every host ran (packed 8 to a process: each still its own connection and its own log)
    logs = Path(s["run_dir"]) / "logs"
    assert all("iteration       30/" in (logs / f"{h.name}.log").read_text() for h in inv.hosts)

    ctx = Context(inv)
    for name in ("ocs1", "ocs2"):
        mine = [r for r in regions.values() if r.ocs == name]
        with ctx.ocs(name=name) as drv:
            held = sorted([i, o] for i, o in drv.cross_connects().items())
            ident = drv.identity
        # the emulator holds exactly its regions' last circuits, and nothing of the other OCS's regions
        planned = sorted([i, o] for r in mine for c in s["ocs"]["circuits"][r.name] for i, o in c["cross_connects"])
        assert held == planned and len(held) == 2 * 12 * len(mine)  # 8 servers x 3 lanes: 12 duplex circuits each
        ports = {p for r in mine for h in r.hosts for _, lane in inv.host(h).ocs_lanes() for p in (lane.ocs_tx, lane.ocs_rx)}
        assert {p for xc in held for p in xc} <= ports
        # its device journal has the changes of its regions' epochs, none of the other switch's
        reasons = {r.get("reason") for r in Journal(journal_path(ident)).records() if r.get("op") == "ocs.intent"}
        epochs = {f"epoch {rc['epoch']}" for r in mine for rc in applied[r.name]}
        others = {f"epoch {rc['epoch']}" for reg, rcs in applied.items() if regions[reg].ocs != name for rc in rcs}
        assert epochs <= reasons and not others & reasons, (name, sorted(reasons))
    cpu = next(r for r in Journal(Path(s["run_dir"]) / "journal.jsonl").records() if r["op"] == "controller.cpu")
    # the controller's own handling stays a small part of an iteration (~5 s of testbed time)
    assert cpu["iterations"] == 30 and cpu["handle_cpu_ms_per_iteration"] < 0.1 * s["iteration_time_s"]["mean"] * 1000
