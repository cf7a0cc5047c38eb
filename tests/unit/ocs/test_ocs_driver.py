"""The OCS driver against the emulator over a real pty, TCP and SSH."""

import paramiko  # a dependency of mfctl (pyproject), not optional
import pytest

from mfctl.errors import OperationFailed, UnreachableError
from mfctl.inventory.models import OCS
from mfctl.mock.ocs_emulator import OCSEmulator, PtyServer, TCPServer, ssh_shell_handler
from mfctl.mock.sshd import MockSSHServer
from mfctl.ocs.client import TL1Deny, TL1Timeout
from mfctl.ocs.driver import OCSDriver, diff, pending_apply
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
    # refused and read back as it was: over, nothing for `mfctl ocs recover` to finish
    assert recs[-1]["unchanged"] is True and pending_apply(recs) is None


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


def test_unreachable_transport_is_exit_4(monkeypatch):
    monkeypatch.setenv("MFCTL_OCS_PASSWORD", "pw")  # (an unset password is refused first: test below)
    ocs = OCS(name="o", size={"inputs": 4, "outputs": 4}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}])
    with pytest.raises(UnreachableError) as e:
        OCSDriver(ocs, connect_timeout=1).connect()
    assert e.value.exit_code == 4 and "127.0.0.1:1" in str(e.value)


def test_diff_moves_an_output_between_inputs():
    d = diff({1: 50, 2: 51}, {3: 50, 2: 51})
    assert d.delete == {1: 50} and d.add == {3: 50} and d.keep == {2: 51}


# --- faults: every one ends in a typed error or a verified, journalled state -----------

def _journal_ops(j):
    return [(r["op"], r.get("state")) for r in j.records()]


def test_link_dies_mid_reply_after_the_change_took(ocs_model, tmp_path):
    ocs, emu = ocs_model
    j = Journal(tmp_path / "j.jsonl")
    with OCSDriver(ocs, journal=j, command_timeout=1, connect_timeout=3) as d:
        emu.faults.die_mid_reply = True  # hits RTRV-PATCH (the read before the change): reconnect and retry
        assert d.apply({1: 50}).verified
        # now kill the link in the middle of the ENT-PATCH reply: the change took, the reply is lost
        emu.faults.on_verb, emu.faults.die_mid_reply = "ENT-PATCH", True
        r = d.apply({1: 50, 2: 51})
        emu.faults.on_verb = None
        assert r.verified and emu.patches == {1: 50, 2: 51}
    states = [s for op, s in _journal_ops(j) if op == "ocs.command"]
    assert "link-lost" in states or "timeout" in states  # a serial line cannot tell a dead peer from silence
    assert j.records()[-1]["op"] == "ocs.outcome" and j.records()[-1]["ok"] is True


def test_silent_partial_apply_is_caught_by_read_back_and_retried(ocs_model, tmp_path):
    ocs, emu = ocs_model
    j = Journal(tmp_path / "j.jsonl")
    with OCSDriver(ocs, journal=j, command_timeout=3) as d:
        emu.faults.partial_apply = 1
        r = d.apply({1: 50, 2: 51, 3: 52})
        assert r.verified and emu.patches == {1: 50, 2: 51, 3: 52}
        assert r.commands == ["ENT-PATCH::1&2&3,50&51&52", "ENT-PATCH::2&3,51&52"]  # only what did not take
    assert [op for op, _ in _journal_ops(j)].count("ocs.retry") == 1


def test_timeout_names_the_limit_and_the_read_recovers(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=0.5, connect_timeout=3) as d:
        emu.faults.timeout_next = True
        assert d.cross_connects() == {}  # timed out once, reconnected, retried
        emu.faults.timeout_next = True
        with pytest.raises(TL1Timeout, match="0.5 s"):
            d.client.command("RTRV-HDR")


def test_dropped_bytes_never_hang(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=0.5, connect_timeout=3) as d:
        emu.faults.drop_bytes = 25
        assert d.cross_connects() == {}


def test_batches_respect_the_device_limit(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=5, max_pairs_per_command=4) as d:
        r = d.apply({i: 48 + i for i in range(1, 11)})
        assert [c.split("::")[0] for c in r.commands] == ["ENT-PATCH"] * 3
        assert emu.patches == {i: 48 + i for i in range(1, 11)}


def test_power_shutters_alarms_and_atag_gaps(ocs_model):
    ocs, emu = ocs_model
    emu.tx_power = {1: 1.0, 2: 0.5}
    with OCSDriver(ocs, command_timeout=5) as d:
        d.apply({1: 50, 3: 51})  # input 3 is dark: LOS on output 51
        p = d.power([1, 50, 51])
        assert p[1] == 1.0 and p[50] == 0.0 and p[51] is None  # 1 dB insertion loss; dark is None
        al = d.alarms(wait_s=0.2)
        assert any(s.startswith("51:MJ,LOS") for s in al["standing"])
        assert any("51:MJ,LOS" in ln for a in al["autonomous"] for ln in a["lines"])
        d.client.command("OPR-PORT-SHUTTER", aid="1")
        assert d.shutters([1, 2]) == {1: "CLOSED", 2: "OPEN"} and d.power([50])[50] is None
        emu.atag += 5  # five autonomous messages "lost" on the way
        d.client.command("RLS-PORT-SHUTTER", aid="1")
        d.alarms(wait_s=0.2)
        assert d.client.atag_gaps


def test_delete_all_needs_confirmation(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=5) as d:
        d.apply({1: 50})
        with pytest.raises(OperationFailed):
            d.disconnect_all()
        assert emu.patches == {1: 50}
        d.disconnect_all(confirm=True)
        assert emu.patches == {}


def test_slow_command_acknowledged_with_ip(ocs_model):
    ocs, emu = ocs_model
    emu.ack_after_s = 0.05
    emu.base_ms = 300
    with OCSDriver(ocs, command_timeout=0.2) as d:  # the IP ack extends the wait
        assert d.apply({1: 50}).verified


def test_pyserial_url_transport_socket(emu, monkeypatch):
    """serial_for_url also takes socket:// (a terminal server): same client, same results."""
    srv = TCPServer(emu)
    ocs = OCS(name="o", size={"inputs": 48, "outputs": 48},
              transports=[{"kind": "serial", "device": f"socket://127.0.0.1:{srv.port}"}], password_env="OCS_PW")
    with OCSDriver(ocs, command_timeout=5) as d:
        assert d.endpoint == f"serial:socket://127.0.0.1:{srv.port}"
        assert d.apply({1: 49}).verified
    srv.close()


def test_logged_out_session_logs_in_again(ocs_model):
    ocs, emu = ocs_model
    with OCSDriver(ocs, command_timeout=5) as d:
        for s in emu.sessions:
            s.user = None  # the device's idle timeout logged us out
        assert d.cross_connects() == {}
        d.keepalive()


def test_delete_all_deletes_only_what_a_confirmed_read_showed(ocs_model, tmp_path):
    """Never DLT-PATCH::ALL: on a shared switch that would cut a circuit made after our read."""
    ocs, emu = ocs_model
    j = Journal(tmp_path / "j.jsonl")
    with OCSDriver(ocs, command_timeout=5, journal=j) as d:
        d.apply({1: 50, 2: 51})
        r = d.disconnect_all(confirm=True)
        assert r.commands == ["DLT-PATCH::1&2"] and emu.patches == {}
    assert "ALL" not in [x["aid"] for x in j.records() if x["op"] == "ocs.command"]


def test_serial_line_is_exclusive_and_the_next_transport_is_used(emu, monkeypatch):
    pty_srv, tcp_srv = PtyServer(emu), TCPServer(emu)
    ocs = OCS(name="o", size={"inputs": 48, "outputs": 48}, password_env="OCS_PW",
              transports=[{"kind": "serial", "device": pty_srv.slave_path}, {"kind": "tcp", "address": "127.0.0.1", "port": tcp_srv.port}])
    with OCSDriver(ocs, command_timeout=5) as first, OCSDriver(ocs, command_timeout=5, connect_timeout=2) as second:
        assert first.endpoint.startswith("serial:") and second.endpoint.startswith("tcp:")
        assert first.cross_connects() == second.cross_connects() == {}
    pty_srv.close()
    tcp_srv.close()


def test_password_never_appears_in_errors(emu, monkeypatch):
    srv = TCPServer(emu)
    emu.faults.timeout_verb = "ACT-USER"  # ACT-USER gets no reply
    ocs = OCS(name="o", size={"inputs": 48, "outputs": 48}, password_env="OCS_PW",
              transports=[{"kind": "tcp", "address": "127.0.0.1", "port": srv.port}])
    with pytest.raises(UnreachableError) as e:
        OCSDriver(ocs, command_timeout=5, connect_timeout=0.5).connect()
    assert "s3cret" not in str(e.value) and "******" in str(e.value)
    srv.close()


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_or_empty_password_variable_is_a_config_error_before_connecting(monkeypatch, value):
    """``password_env: MY_OCS_PW`` unset or empty logged in with an empty password (DENY PIUI, exit 1):
    on a real switch failed logins can lock the account. Now exit 3 naming the variable, nothing connected."""
    from mfctl.errors import ConfigError

    if value is None:
        monkeypatch.delenv("MY_OCS_PW", raising=False)
    else:
        monkeypatch.setenv("MY_OCS_PW", value)
    opened = []
    ocs = OCS(name="o", size={"inputs": 4, "outputs": 4}, password_env="MY_OCS_PW",
              transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}])
    d = OCSDriver(ocs, connect_timeout=1)
    monkeypatch.setattr(d, "_open", lambda t: opened.append(t))
    with pytest.raises(ConfigError) as e:
        d.connect()
    assert str(e.value).startswith(f"OCS o: $MY_OCS_PW (ocs.password_env) is {'not set' if value is None else 'empty'}")
    assert e.value.exit_code == 3 and opened == []
    no_password = ocs.model_copy(update={"password_env": None})  # a switch without one: said in the inventory
    assert no_password.password() == ""
