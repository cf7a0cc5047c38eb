"""A host read's batch: the read-only commands known in advance run as one ``sh -c`` (one SSH round
trip) and each keeps its own stdout, stderr and exit status — checked against a real ``/bin/sh``,
and on the mock (38 round trips per host read of the breakout testbed's gpu01 before, 5 now; through
the mock's own sshd that read took 4.5 s one by one and 0.8 s batched on this machine)."""

import subprocess
import sys

import pytest

from mfctl import mockctl
from mfctl.errors import OperationFailed
from mfctl.inventory import load_inventory
from mfctl.provision import batch, plan
from mfctl.transport.ssh import CommandResult, SSHPool, targets_from_inventory
from support import ROOT


class LocalShell:
    """A pool whose one host is this machine's /bin/sh (a real shell, real coreutils)."""

    command_timeout = 10.0

    def __init__(self):
        self.sent: list[list[str]] = []

    def run(self, host, argv, timeout=None, **kw):
        self.sent.append(list(argv))
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        return CommandResult(host=host, argv=list(argv), rc=p.returncode, stdout=p.stdout, stderr=p.stderr)


def test_each_command_of_a_batch_keeps_its_own_output_status_and_error():
    sh = LocalShell()
    bp = batch.Prefetched(sh, "local")
    argvs = [["echo", "it's one"], ["ls", "/nonexistent-dir"], ["printf", "no newline"], ["true"], [sys.executable, "-c",
             "import sys; sys.stderr.write('warn\\n'); print('x'); sys.exit(3)"]]
    bp.prefetch(argvs)
    assert len(sh.sent) == 1 and sh.sent[0][:2] == ["sh", "-c"]  # one round trip for five commands
    got = [bp.run("local", a) for a in argvs]
    assert len(sh.sent) == 1  # all answered from the batch
    assert [(r.rc, r.stdout) for r in got] == [(0, "it's one\n"), (2, ""), (0, "no newline"), (0, ""), (3, "x\n")]
    assert got[1].stderr == "ls: cannot access '/nonexistent-dir': No such file or directory\n" and got[4].stderr == "warn\n"
    with pytest.raises(OperationFailed, match=r"^local: ls /nonexistent-dir: exit 2: ls: cannot access"):
        bp.run_checked("local", ["ls", "/nonexistent-dir"])  # answered once: the second time it runs on its own
    assert len(sh.sent) == 2 and sh.sent[1] == ["ls", "/nonexistent-dir"]


def test_a_batch_that_fails_as_a_whole_leaves_every_command_to_run_on_its_own():
    class Down(LocalShell):
        def run(self, host, argv, timeout=None, **kw):
            self.sent.append(list(argv))
            return CommandResult(host=host, argv=list(argv), error="timeout: command did not finish within 20 s")

    d = Down()
    bp = batch.Prefetched(d, "h")
    bp.prefetch([["a"], ["b"]])
    assert bp.run("h", ["a"]).error.startswith("timeout") and d.sent[-1] == ["a"] and bp.round_trips == 2
    assert batch.split("@@mfctl-batch 0\nonly half", "@@mfctl-batch 0\n", 1) == {}  # cut off: not taken


@pytest.mark.usefixtures("paramiko_mock_hosts")
def test_a_host_read_on_the_mock_takes_5_round_trips_and_reads_the_same(tmp_path, monkeypatch):
    st = mockctl.start(ROOT / "inventory" / "mfabric-breakout.yaml", tmp_path / "mock", time_scale=100)
    inv = load_inventory(st["inventory"])
    pool = SSHPool(targets_from_inventory(inv))
    try:
        act = plan.read_actual(pool, inv.host("gpu01"))
        monkeypatch.setattr(batch.Prefetched, "prefetch", lambda self, argvs: None)
        alone = plan.read_actual(pool, inv.host("gpu01"))
    finally:
        pool.close()
        mockctl.stop(tmp_path / "mock")
    assert (act.more["round_trips"], alone.more["round_trips"]) == (5, 38)
    for k in set(act.more) - {"round_trips"}:
        assert repr(act.more[k]) == repr(alone.more[k]), k
    assert (act.ports, act.ifaces, act.gpus, act.mlx.keys()) == (alone.ports, alone.ifaces, alone.gpus, alone.mlx.keys())
