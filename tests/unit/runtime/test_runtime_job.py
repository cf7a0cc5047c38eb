"""The job's phases and teardown with a testbed of the test's own (no mock, no SSH): what was
acquired is released in reverse, a failure is the run's outcome with its records written."""


from mfctl.errors import ConfigError
from mfctl.observer import RecordingObserver
from mfctl.runtime.job import Job, Observer
from mfctl.runtime.playbook import load_playbook
from support import PROTOTYPE, ROOT


class FakeTestbed:
    """A testbed that refuses its inventory in check(), after start()."""

    time_scale = 7.0

    def __init__(self, refuse: Exception | None = None):
        self.refuse, self.calls = refuse, []

    def start(self, run_dir, observer):
        self.calls.append("start")
        observer.phase("mock", "a test's testbed")
        return str(PROTOTYPE)

    def check(self, inv):
        self.calls.append(("check", inv.name))
        if self.refuse:
            raise self.refuse

    def stop(self):
        self.calls.append("stop")

    def controller_listen(self, inv):
        return "127.0.0.1"

    def welcome_fields(self, host):
        return {}


class Watch(RecordingObserver, Observer):
    pass


def test_a_refused_testbed_is_a_failed_run_that_leaves_no_directory_and_the_testbed_stopped(tmp_path):
    """Refused before it held the testbed lock: the summary is the command's answer, but no run
    directory is left (issue 17 item 7: one rule with a playbook that does not fit)."""
    tb = FakeTestbed(ConfigError("not this one", path="x.yaml"))
    obs = Watch()
    job = Job(load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), runs_dir=str(tmp_path), testbed=tb,
              observer=obs)
    s = job.run()
    assert tb.calls == ["start", ("check", "mfabric-prototype"), "stop"]
    assert (s["status"], s["exit_code"], s["error"]) == ("failed", 3, "x.yaml: not this one")
    assert s["time_scale"] == 7.0 and s["inventory"] == "mfabric-prototype" and s["iterations"] == 0
    assert s["health"] == {"hosts": 0, "ok": 0, "sweep_s": 0.0} and "ocs" not in s and s["slurm_job"] is None
    assert s["initial_topology"]["hosts"] == {"region0": ["gpu01", "gpu02", "gpu03", "gpu04"]}
    assert s["run_dir"] == "" and not job.run_dir.exists() and not list(tmp_path.glob("2*"))
    assert obs.events == [("phase", "mock", None)]


def test_an_unexpected_error_is_raised_after_the_teardown(tmp_path):
    tb = FakeTestbed(RuntimeError("a bug"))
    job = Job(load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), runs_dir=str(tmp_path), testbed=tb)
    try:
        job.run()
    except RuntimeError as e:
        assert str(e) == "a bug"
    else:
        raise AssertionError("not raised")
    assert tb.calls[-1] == "stop" and not (job.run_dir / "summary.json").exists()
