"""Health: every host answers the same, and the gated checks pass."""

import pytest

from mfctl import health


def test_every_host_reports_its_gpus_alike(hosts, testbed):
    results = hosts.run_many(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    folded = hosts.fold(results)
    assert [h for h, _ in folded] == ["gpu[01-04]"], folded  # one answer for the four hosts
    [(_, r)] = folded
    assert r.ok and len(r.stdout.splitlines()) == testbed.hosts[0].gpus.count


@pytest.mark.mfctl(health="gpu,xid,nvlink", hosts="gpu[01-02]")
def test_the_gpu_checks_pass(mfctl_session):
    rep = health.sweep(mfctl_session.pool(), mfctl_session.inventory, ["gpu01", "gpu02"], checks=["gpu", "xid", "nvlink"])
    assert rep.healthy, [f.message for f in rep.findings if f.severity == "critical"]
