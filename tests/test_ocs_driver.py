"""The OCS driver against the emulator over a real pty, TCP and SSH."""

import pytest

paramiko = pytest.importorskip("paramiko")

from mfctl.errors import UnreachableError
from mfctl.inventory.models import OCS
from mfctl.mock.ocs_emulator import OCSEmulator, PtyServer, TCPServer, ssh_shell_handler
from mfctl.mock.sshd import MockSSHServer
from mfctl.ocs.client import TL1Deny
from mfctl.ocs.driver import OCSDriver, diff
from mfctl.ocs.journal import Journal


@pytest.fixture
def emu(monkeypatch):
    monkeypatch.setenv("OCS_PW", "s3cret")
    e = OCSEmulator(48, 48, sid="OCS1", password="s3cret", base_ms=5, per_xc_ms=0.1, delete_ms=1)
    yield e


@pytest.fixture(params=["serial", "tcp", "ssh"])
def ocs_model(request, emu, tmp_path):
    closers = []
    if request.param == "serial":
        srv = PtyServer(emu)
        closers.append(srv)
        tr = {"kind": "serial", "device": srv.slave_path, "baudrate": 115200}
        kh = None
    elif request.param == "tcp":
        srv = TCPServer(emu)
        closers.append(srv)
        tr = {"kind": "tcp", "address": "127.0.0.1", "port": srv.port}
        kh = None
    else:
        hk = paramiko.ECDSAKey.generate(bits=256)
        srv = MockSSHServer("ocs", hk, users={"admin"}, password="s3cret", on_shell=ssh_shell_handler(emu))
        closers.append(srv)
        kh = tmp_path / "known_hosts"
        kh.write_text(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}\n")
        tr = {"kind": "ssh", "address": "127.0.0.1", "port": srv.port}
    yield OCS(name="ocs1", size={"inputs": 48, "outputs": 48}, transports=[tr], password_env="OCS_PW",
              known_hosts=str(kh) if kh else None), emu
    for c in closers:
        c.close()


def test_apply_changes_only_the_difference_and_reads_back(ocs_model, tmp_path):
    ocs, emu = ocs_model
    j = Journal(tmp_path / "j.jsonl")
    with OCSDriver(ocs, journal=j, command_timeout=5) as d:
        assert d.size == (48, 48)
        r1 = d.apply({1: 50, 2: 49})
        assert r1.verified and r1.readback == {1: 50, 2: 49}
        assert r1.commands == ["ENT-PATCH::1&2,50&49"]
        r2 = d.apply({1: 50, 2: 51, 3: 49})
        assert r2.diff.keep == {1: 50}  # the unchanged circuit is not touched
        assert r2.commands == ["DLT-PATCH::2", "ENT-PATCH::2&3,51&49"]
        assert emu.patches == {1: 50, 2: 51, 3: 49}
        assert d.apply({1: 50, 2: 51, 3: 49}).commands == []  # idempotent
    ops = [r["op"] for r in j.records()]
    assert ops.count("ocs.intent") == 3 and ops.count("ocs.verify") == 3
    assert all(r["matches"] for r in j.records() if r["op"] == "ocs.verify")


def test_deny_is_typed_and_journalled(ocs_model, tmp_path):
    ocs, emu = ocs_model
    emu.faults.deny_ports = {5}
    j = Journal(tmp_path / "j.jsonl")
    with OCSDriver(ocs, journal=j, command_timeout=5) as d:
        with pytest.raises(TL1Deny) as e:
            d.apply({5: 60})
        assert e.value.code == "SROF"
    recs = j.records()
    assert recs[-1]["op"] == "ocs.outcome" and recs[-1]["ok"] is False
    assert any(r.get("state") == "denied" and r.get("code") == "SROF" for r in recs)


def test_alarm_between_command_and_reply_is_queued(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=5) as d:
        emu.faults.alarm_before_reply = True
        emu.faults.garble_before_reply = True
        assert d.cross_connects() == {}
        assert [a.verb for a in d.client.autonomous] == ["REPT ALM OCS"]


def test_wrong_password_and_unknown_ssh_host_key(emu, tmp_path, monkeypatch):
    srv = TCPServer(emu)
    monkeypatch.setenv("OCS_PW", "wrong")
    ocs = OCS(name="o", size={"inputs": 48, "outputs": 48}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": srv.port}],
              password_env="OCS_PW")
    with pytest.raises(TL1Deny) as e:
        OCSDriver(ocs, command_timeout=2).connect()
    assert e.value.code == "PIUI"
    hk = paramiko.ECDSAKey.generate(bits=256)
    ssh = MockSSHServer("ocs", hk, users={"admin"}, password="wrong", on_shell=ssh_shell_handler(emu))
    (tmp_path / "empty_known_hosts").write_text("")
    ocs2 = OCS(name="o", size={"inputs": 48, "outputs": 48}, transports=[{"kind": "ssh", "address": "127.0.0.1", "port": ssh.port}],
               password_env="OCS_PW", known_hosts=str(tmp_path / "empty_known_hosts"))
    with pytest.raises(UnreachableError, match="not in"):
        OCSDriver(ocs2, connect_timeout=3).connect()
    srv.close()
    ssh.close()


def test_unreachable_transport_is_exit_4():
    ocs = OCS(name="o", size={"inputs": 4, "outputs": 4}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}])
    with pytest.raises(UnreachableError) as e:
        OCSDriver(ocs, connect_timeout=1).connect()
    assert e.value.exit_code == 4 and "127.0.0.1:1" in str(e.value)


def test_diff_moves_an_output_between_inputs():
    d = diff({1: 50, 2: 51}, {3: 50, 2: 51})
    assert d.delete == {1: 50} and d.add == {3: 50} and d.keep == {2: 51}
