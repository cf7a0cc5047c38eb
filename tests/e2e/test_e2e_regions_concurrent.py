"""End to end: regions reconfigure independently and concurrently (issue 22). Two regions of 4
servers share one OCS; region0's optical lanes come up late (``--inject gpu01:linkup=slow:100``,
100 testbed s more than the modelled 5.67 s). While region0's reconfiguration waits for its
lanes, region1 goes on training, decides, and is reconfigured on the same OCS — its TL1 change
computed from what the switch holds with region0's change on it."""

import importlib.util
from pathlib import Path

import yaml

from mfctl import mockctl
from mfctl.context import Context
from mfctl.ocs.journal import Journal
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from support import DATA

ROOT = DATA.parent.parent
SCALE = 20


def gen_scale():
    spec = importlib.util.spec_from_file_location("gen_scale", ROOT / "inventory" / "gen_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files(tmp_path: Path) -> tuple[Path, Path]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(gen_scale().inventory(8, 4, 1, "two-regions")))
    doc = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
    doc.update(name="regions-concurrent", inventory=str(inv))
    doc["mock"] = {"enabled": True, "time_scale": SCALE}
    doc["training"].update(iterations=40, phase_iterations=2)
    doc["policy"] = {"window_iterations": 10, "min_interval_iterations": 2, "min_gain_s": -1000.0, "min_improvement": 0.0}
    doc["runtime"] = {"health_interval_s": 0, "linkup_timeout_s": 200}
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump(doc))
    return inv, pb


def test_a_slow_link_up_in_one_region_does_not_stall_another(tmp_path):
    inv, pb = _files(tmp_path)
    mock = mockctl.start(inv, tmp_path / "mock", time_scale=SCALE, inject=["gpu01:linkup=slow:100"], sshd="paramiko")
    try:
        s = Job(load_playbook(pb), inventory_override=mock["inventory"], runs_dir=str(tmp_path / "runs")).run()
        assert s["status"] == "ok", (s.get("error"), s.get("warnings"))
        recs = s["reconfigurations"]
        slow = [r for r in recs if r["region"] == "region0" and r["t_linkup_ms"] > 100_000]
        assert slow, [(r["region"], r["epoch"], r["t_linkup_ms"]) for r in recs]
        j = Journal(Path(s["run_dir"]) / "journal.jsonl").records()
        when = {}
        for r in j:
            if r["op"] in ("reconfig.propose", "reconfig.done"):
                when.setdefault(r["epoch"], {})[r["op"]] = r["ts"]
        # region1 was proposed, switched, linked up and resumed entirely inside one of region0's slow ones
        inside = [(a["epoch"], b["epoch"]) for a in slow for b in recs if b["region"] == "region1"
                  and when[a["epoch"]]["reconfig.propose"] < when[b["epoch"]]["reconfig.propose"]
                  and when[b["epoch"]]["reconfig.done"] < when[a["epoch"]]["reconfig.done"]]
        assert inside, {e: w for e, w in when.items()}
        a_ep, b_ep = inside[0]
        b = next(r for r in recs if r["epoch"] == b_ep)
        assert b["outcome"] == "applied" and b["lanes_failed"] == 0 and b["t_ocs_wait_ms"] < 1000
        assert b["t_decision_to_resume_ms"] < 0.5 * next(r for r in recs if r["epoch"] == a_ep)["t_decision_to_resume_ms"]
        # one OCS for both: what it holds at the end is both regions' last circuits (neither undid the other)
        ocs = s["ocs"]
        assert ocs["matches_last_plan"] is True
        with Context.from_settings(__import__("mfctl.inventory", fromlist=["x"]).load_inventory(mock["inventory"])).ocs() as drv:
            held = sorted([i, o] for i, o in drv.cross_connects().items())
        planned = sorted([i, o] for reg in ("region0", "region1") for c in ocs["circuits"][reg] for i, o in c["cross_connects"])
        assert held == planned and len(planned) >= 16
        cpu = next(r for r in j if r["op"] == "controller.cpu")
        assert cpu["iterations"] == 40 and 0 < cpu["handle_cpu_s"] < cpu["process_cpu_s"]
    finally:
        mockctl.stop(tmp_path / "mock")
