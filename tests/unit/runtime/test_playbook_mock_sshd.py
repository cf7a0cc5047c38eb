"""A playbook says what serves its own mock hosts' SSH (``mock.sshd``): the scale playbooks say
paramiko, so ``mfctl run`` of them works without MFCTL_MOCK_SSHD (the trial: 32 OpenSSH hosts did not
come up within 30 s on a loaded machine, and only a comment said to set it)."""

import pytest

from mfctl import mockctl
from mfctl.observer import NullObserver
from mfctl.runtime.playbook import load_playbook
from support import ROOT


@pytest.mark.parametrize("name, sshd", [("mixtral-slurm-256-mock", "paramiko"), ("mixtral-slurm-1024-mock", "paramiko"),
                                        ("mixtral-prototype", None)])
def test_the_runs_own_mock_is_started_with_the_playbooks_sshd(name, sshd, monkeypatch, tmp_path):
    pb = load_playbook(ROOT / "playbooks" / f"{name}.yaml")
    assert pb.mock.sshd == sshd
    got = {}

    def fake_start(src, state_dir, **kw):
        got.update(kw)
        return {"inventory": str(tmp_path / "inventory.yaml")}

    monkeypatch.setattr(mockctl, "start", fake_start)
    assert mockctl.MockTestbed(pb).start(tmp_path, NullObserver()) == str(tmp_path / "inventory.yaml")
    assert got["sshd"] == sshd  # None: the mock_sshd setting decides, as before
