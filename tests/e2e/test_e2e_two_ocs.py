"""End to end: the main job on the mock of inventory/mfabric-2ocs.yaml — two regions, each on an
OCS of its own (one emulator each) — reconfigures each region on its own switch."""

from pathlib import Path

import yaml

from mfctl import mockctl
from mfctl.context import Context
from mfctl.inventory import load_inventory
from mfctl.ocs.identity import journal_path
from mfctl.ocs.journal import Journal
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from support import DATA

TWO = DATA.parent.parent / "inventory" / "mfabric-2ocs.yaml"
SCALE = 10  # (at 50 a region could train to its end while the other region's hosts still start: no reconfiguration)


def _playbook(tmp_path: Path) -> Path:
    doc = yaml.safe_load((DATA / "playbooks" / "short.yaml").read_text())
    doc.update(name="two-ocs-e2e", inventory=str(TWO))
    doc["mock"] = {"enabled": True, "time_scale": SCALE}
    doc["parallelism"] = {"ep": 8, "tp": 4}  # a region is 4 servers x 8 GPUs, as the prototype's
    doc["training"].update(iterations=12)
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_each_region_reconfigures_on_its_own_ocs(tmp_path):
    mock = mockctl.start(TWO, tmp_path / "mock", time_scale=SCALE, timeout=90)
    try:
        s = Job(load_playbook(_playbook(tmp_path)), inventory_override=mock["inventory"],
                runs_dir=str(tmp_path / "runs")).run()
        assert s["status"] == "ok", (s.get("error"), s.get("warnings"))
        assert s["iterations"] == 12
        by_region: dict[str, list[dict]] = {}
        for rc in s["reconfigurations"]:
            by_region.setdefault(rc["region"], []).append(rc)
        assert set(by_region) == {"region0", "region1"}, [(r["region"], r["outcome"]) for r in s["reconfigurations"]]
        assert all(rc["outcome"] == "applied" for rc in s["reconfigurations"])

        inv = load_inventory(mock["inventory"])
        ocs = s["ocs"]
        assert ocs["matches_last_plan"] is True and set(ocs["by_ocs"]) == {"ocs-a", "ocs-b"}
        ctx = Context(inv)
        for name, region in (("ocs-a", "region0"), ("ocs-b", "region1")):
            # what each emulator holds now is its region's circuits, and nothing of the other region's
            with ctx.ocs(name=name) as drv:
                held = drv.cross_connects()
                serial = drv.identity.serial
            planned = sorted([i, o] for c in ocs["circuits"][region] for i, o in c["cross_connects"])
            assert sorted([i, o] for i, o in held.items()) == planned == ocs["by_ocs"][name]["cross_connects"]
            assert ocs["by_ocs"][name]["matches_last_plan"] is True
            assert len(planned) >= 8  # 4 servers x 3 lanes: at least 4 duplex circuits among them
            assert serial == inv.ocs_named(name).serial
            # each region's reconfigurations were changes of its own switch: in its device journal only
            epochs = {f"epoch {rc['epoch']}" for rc in by_region[region]}
            other = {f"epoch {rc['epoch']}" for r, rcs in by_region.items() if r != region for rc in rcs}
            dev = Journal(journal_path(drv.identity)).records()
            reasons = {r.get("reason") for r in dev if r.get("op") == "ocs.intent"}
            assert epochs <= reasons and not other & reasons, (name, reasons)
            assert {"initial topology"} <= reasons
            assert {r.get("ocs") for r in dev if r.get("op") == "ocs.intent"} == {name}
    finally:
        mockctl.stop(tmp_path / "mock")
