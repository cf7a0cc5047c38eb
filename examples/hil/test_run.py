"""A short run: the main job on the testbed, reconfiguring the OCS during training."""

from pathlib import Path

SHORT = Path(__file__).with_name("short.yaml")


def test_a_short_run_trains_and_reconfigures(runner):
    s = runner(SHORT)
    assert s["status"] == "ok" and s["exit_code"] == 0, s.get("error")
    assert s["iterations"] == s["iterations_planned"] == 8
    assert s["ocs"]["matches_last_plan"]  # the OCS read back at the end holds the last plan
    assert s["health"]["ok"] == s["health"]["hosts"] == 4
