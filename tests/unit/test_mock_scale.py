"""The mock's economies at scale (issue 22): the mock srun packing tasks into one process, and the
link-up faults a region's slow or dead transceivers are injected with."""

import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from mfctl.mock import inject
from mfctl.mock.hosts import MockHost, MockLane

# a task that says who it stands for: the first task's lines plain, the packed others' marked
TASK = textwrap.dedent("""
    import os
    from mfctl.mock.slurmshim import pack_tasks
    tasks = pack_tasks() or [(int(os.environ["SLURM_PROCID"]), os.environ["SLURMD_NODENAME"])]
    print(f"pid {os.getpid()} first {os.environ['SLURM_PROCID']} {os.environ['SLURMD_NODENAME']}", flush=True)
    for r, node in tasks[1:]:
        print(f"@pack {r} hello from {node}", flush=True)
""")


def srun(env_extra: dict) -> list[str]:
    env = {"SLURM_JOB_ID": "4001", "SLURM_JOB_NODELIST": "gpu[01-05]", "PATH": "/usr/bin:/bin", **env_extra}
    out = subprocess.run([sys.executable, "-m", "mfctl.mock.slurmshim", "srun", "--label", sys.executable, "-c", TASK],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.splitlines()


def test_packed_tasks_run_in_one_process_per_pack_and_are_labelled_as_their_task():
    lines = srun({"MFCTL_MOCK_PACK": "2"})
    firsts = sorted(ln for ln in lines if " first " in ln)
    # 5 tasks in packs of 2: processes for tasks 0, 2 and 4, each its pack's first
    assert [ln.split(": ", 1)[0] for ln in firsts] == ["0", "2", "4"]
    assert [ln.split()[-2:] for ln in firsts] == [["0", "gpu01"], ["2", "gpu03"], ["4", "gpu05"]]
    assert len({ln.split()[2] for ln in firsts}) == 3  # three processes
    # a packed task's line carries its own label, the mark gone
    assert sorted(ln for ln in lines if "hello" in ln) == ["1: hello from gpu02", "3: hello from gpu04"]


def test_without_packing_every_task_is_a_process_of_its_own():
    lines = srun({})
    firsts = sorted(ln for ln in lines if " first " in ln)
    assert [ln.split(": ", 1)[0] for ln in firsts] == ["0", "1", "2", "3", "4"] and not any("hello" in ln for ln in lines)


class _Emu:
    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.patches = {1: 6, 2: 5}  # lane a (tx 1, rx 5) and lane b (tx 2, rx 6) joined both ways
        self.changed_at = {1: time.monotonic() - 100, 2: time.monotonic() - 100}  # long ago


def _testbed():
    a, b = MockLane("ens1f0np0", 1, 5, "m:a"), MockLane("ens1f0np0", 2, 6, "m:b")
    tb = SimpleNamespace(ocs=_Emu(), time_scale=1.0, lane_by_rx={5: a, 6: b}, hosts={})
    tb.hosts = {"gpu01": MockHost("gpu01", 8, "A100", [a], testbed=tb), "gpu02": MockHost("gpu02", 8, "A100", [b], testbed=tb)}
    return tb, a, b


def test_linkup_faults_delay_or_kill_a_hosts_lanes():
    tb, a, b = _testbed()
    assert tb.hosts["gpu01"].lane_up(a) and tb.hosts["gpu02"].lane_up(b)  # changed 100 s ago: up (5.0-6.6 s)
    assert inject.apply(tb, "gpu01:linkup=slow:200") == "gpu01: optical lanes come up 200 s late"
    assert not tb.hosts["gpu01"].lane_up(a) and tb.hosts["gpu02"].lane_up(b)  # 100 s < 205 s: still coming up
    assert inject.apply(tb, "gpu02:linkup=fail") == "gpu02: optical lanes never come up"
    assert not tb.hosts["gpu02"].lane_up(b)
    with pytest.raises(ValueError, match="the testbed seconds"):
        inject.apply(tb, "gpu01:linkup=slow:0")
