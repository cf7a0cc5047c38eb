"""``provision optics`` right after ``ocs connect``: the new circuit's lanes are down because link-up
after a switch takes ~6 s (the mock at time scale 1 models it: 5.67 s mean), and the finding says
so and to retry (the OCS's own journal dates the change); once they are up, the same check is ok."""

import json
import subprocess
import time

import pytest

from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.ocs.driver import driver_from_inventory
from mfctl.provision import optics, service
from mfctl.provision.models import load_spec
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import PROTOTYPE, ROOT, mfctl_cmd

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.fixture
def real_time(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=1)  # link-up as on the testbed: ~6 s
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=120)  # noqa: E731
    yield st["inventory"], run
    mockctl.stop(tmp_path / "mock")


def _optics_in_process(inv_path):
    """What ``provision optics`` does, in this process (no interpreter start: well inside the link-up time)."""
    inv = load_inventory(inv_path)
    some = inv.model_copy(update={"hosts": [h for h in inv.hosts if h.name in ("gpu01", "gpu02")]})
    with driver_from_inventory(inv) as drv:
        xc = drv.cross_connects()
        power = drv.power(sorted(set(xc.values())))
        changed = service.recent_ocs_changes(drv)
    pool = SSHPool(targets_from_inventory(some))
    try:
        return changed, service.check_optics(pool, some, load_spec(SPEC), power, xc, changed=changed)
    finally:
        pool.close()


def test_lanes_down_right_after_an_ocs_change_say_retry_then_are_ok(real_time):
    inv, run = real_time
    r = run("ocs", "connect", "gpu01/nic0", "gpu02/nic0", "-i", inv, "--yes")
    assert r.returncode == 0, r.stderr[-2000:]
    t_change = time.monotonic()  # (the change itself ended a little earlier: the CLI's exit came after it)
    t0 = time.monotonic()
    changed, lanes = _optics_in_process(inv)
    assert sorted(changed) == [1, 4, 385, 388] and all(0 <= v <= optics.RECENT_S for v in changed.values())
    age = min(changed.values()) + (time.monotonic() - t0)  # how long after the change the lanes were read, at most
    if age >= 5.0:  # the link-up time is 5.0 s at the least: later than that the lanes may be up already
        pytest.skip(f"the lanes were read {age:.1f} s after the change on this loaded machine: nothing left to hint")
    rows = [x for x in lanes if x["status"] != "no circuit"]
    assert [(x["host"], x["lane"], x["status"]) for x in rows] == [("gpu01", "nic0.0", "bad"), ("gpu02", "nic0.0", "bad")]
    for x in rows:
        assert x["retry"] is True and x["findings"][0].startswith("link down ") and x["findings"][0].endswith(
            "s after an OCS change of its ports: link-up after a switch takes ~6 s (p99 6.3 s); retry"), x
    time.sleep(max(0.0, t_change + optics.LINKUP_S + 0.5 - time.monotonic()))
    r = run("provision", "optics", SPEC, "-i", inv, "--hosts", "gpu01,gpu02", "--json")  # the CLI, once they are up
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["checked"] == 2 and doc["bad"] == 0, r.stdout[-2000:]
    assert not any(x.get("retry") for x in doc["lanes"])


def test_only_a_recent_change_of_the_lanes_own_ports_gives_the_hint():
    lane = type("Lane", (), {"ocs_tx": 1, "ocs_rx": 401})()
    row = lambda: {"findings": ["link down", "Rx power below -9.0 dBm"]}  # noqa: E731
    assert optics._hint(row(), lane, {401: 2.0})["findings"][0].startswith("link down 2.0 s after an OCS change")
    assert optics._hint(row(), lane, {401: 9.0})["findings"][0] == "link down"  # long after: down is down
    assert optics._hint(row(), lane, {7: 1.0})["findings"][0] == "link down"  # another lane's ports
