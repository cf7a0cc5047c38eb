"""The Launcher protocol's two launchers and the testbed objects, without a testbed."""

import json
from types import SimpleNamespace

import pytest

from mfctl.errors import ConfigError
from mfctl.inventory import load_inventory
from mfctl.mockctl import MockTestbed
from mfctl.observer import RecordingObserver
from mfctl.runtime import testbed as tb_mod
from mfctl.runtime.launcher import SSHLauncher, launcher_for
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.slurm import SlurmLaunch
from mfctl.runtime.testbed import Hardware, advertised_ip
from support import PROTOTYPE, ROOT

MIXTRAL = ROOT / "playbooks" / "mixtral-prototype.yaml"


class FakePool:
    """What SlurmLaunch.stop asks of the pool: scancel ends the job."""

    def __init__(self):
        self.ran, self.launch = [], None

    def run(self, host, argv, **kw):
        self.ran.append((host, argv))
        if argv[0] == "scancel":
            self.launch._ended.set()
        return SimpleNamespace(ok=True, rc=0, error=None, stderr="", stdout="")


@pytest.fixture
def pb():
    return load_playbook(MIXTRAL)


def test_launcher_for_picks_by_the_playbook(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    obs = RecordingObserver()
    ssh = launcher_for(pb, inv, FakePool(), tmp_path, "run1", journal=None, observer=obs)
    assert isinstance(ssh, SSHLauncher) and ssh.job_id is None and ssh.workers == {}
    pb.runtime.launcher, pb.runtime.slurm.submit_host = "slurm", "gpu03"
    sl = launcher_for(pb, inv, FakePool(), tmp_path, "run1", journal=None, observer=obs)
    assert isinstance(sl, SlurmLaunch) and sl.submit_host == "gpu03" and sl.hosts == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert sl.queue_timeout_s == pb.runtime.slurm.queue_timeout_s and sl.log_dir == tmp_path / "logs"


def test_a_failed_runs_slurm_job_is_cancelled_at_once_and_says_so(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    pb.runtime.launcher = "slurm"
    pool, obs = FakePool(), RecordingObserver()
    sl = SlurmLaunch.for_run(pb, inv, pool, tmp_path, "run1", journal=None, observer=obs)
    pool.launch, sl.job_id = sl, 42
    for w in sl.workers.values():
        w.done.set()
    sl.stop(grace_s=0.0)
    assert pool.ran == [("gpu01", ["scancel", "42"])]
    assert obs.events == [("phase", "stop", None)]


def test_a_job_that_ended_is_not_cancelled(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    pool, obs = FakePool(), RecordingObserver()
    sl = SlurmLaunch.for_run(pb, inv, pool, tmp_path, "run1", journal=None, observer=obs)
    sl.job_id = 7
    sl._ended.set()
    for w in sl.workers.values():
        w.done.set()
    sl.stop(grace_s=0.0)
    assert pool.ran == [] and obs.events == []


def test_hardware_and_the_mock_are_chosen_in_one_place(pb, tmp_path):
    assert isinstance(tb_mod.testbed_for(pb), MockTestbed)
    pb.mock.enabled = False
    hw = tb_mod.testbed_for(pb, "/some/inventory.yaml")
    assert isinstance(hw, Hardware) and hw.time_scale == 1.0
    assert hw.start(tmp_path, RecordingObserver()) == "/some/inventory.yaml" and hw.welcome_fields("gpu01") == {}
    assert advertised_ip("127.0.0.1") == "127.0.0.1"


def test_the_mock_testbed_crashes_one_host_and_checks_a_hand_started_mocks_time_scale(pb, tmp_path):
    pb.mock.crash_host, pb.mock.crash_at_iteration = "gpu02", 5
    tb = MockTestbed(pb, str(tmp_path / "inventory.yaml"))
    assert tb.time_scale == 20.0 and tb.controller_listen(None) == "127.0.0.1"
    assert tb.welcome_fields("gpu02") == {"crash_at_iteration": 5}
    assert tb.welcome_fields("gpu01") == {"crash_at_iteration": None}
    assert tb.start(tmp_path, RecordingObserver()) == str(tmp_path / "inventory.yaml")  # started by hand: not ours
    inv = SimpleNamespace(source=str(tmp_path / "inventory.yaml"))
    tb.check(inv)  # no status.json: nothing to compare
    (tmp_path / "status.json").write_text(json.dumps({"time_scale": 20}))
    tb.check(inv)
    (tmp_path / "status.json").write_text(json.dumps({"time_scale": 10}))
    with pytest.raises(ConfigError, match="runs at time scale 10 but the playbook says 20"):
        tb.check(inv)
    tb.stop()  # nothing of ours to stop
