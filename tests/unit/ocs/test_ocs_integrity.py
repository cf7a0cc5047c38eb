"""The OCS can't be talked into a wrong state (issue 13, items 1-6): TL1 hygiene, confirmed
reads, one chain per change and its recoveries, a journal that survives its own damage,
locks and journals keyed by the device, no password anywhere.

Each test reproduces an attack or a fault against the emulator on 127.0.0.1 (TCP or a real
pseudo-terminal) and checks the switch's own state (``emu.patches``), not only what mfctl says.
"""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mfctl.errors import ConfigError, LockError
from mfctl.inventory.models import OCS
from mfctl.mock.ocs_emulator import OCSEmulator, PtyServer, TCPServer
from mfctl.ocs import tl1
from mfctl.ocs.client import TL1Deny
from mfctl.ocs.driver import OCSDriver, UnconfirmedRead, open_ocs, pending_apply, recover
from mfctl.ocs.identity import WrongDevice
from mfctl.ocs.journal import Journal, JournalError
from support import ROOT, mfctl_cmd

BEFORE = {1: 49, 2: 50, 3: 51}
DESIRED = {1: 49, 2: 52, 4: 50}  # keep 1, move 2, drop 3, add 4
PW = "s3cret-pw"
RESERVED_AND_CONTROL = [";", ":", ",", '"', "&", "\x00", "\r", "\n", "\x1b", "\x7f", " ", "é"]


class Recorder:
    """Every command the emulator receives (verb and raw text)."""

    def __init__(self, emu):
        self.seen: list[str] = []
        orig = emu.execute

        def execute(text, session, armed=True):
            self.seen.append(text)
            return orig(text, session, armed)

        emu.execute = execute

    def verbs(self):
        return [t.split(":", 1)[0].strip().upper() for t in self.seen]


@pytest.fixture
def emu(monkeypatch):
    monkeypatch.setenv("OCS_PW", PW)
    e = OCSEmulator(48, 48, sid="OCS1", password=PW, base_ms=2, per_xc_ms=0.05, delete_ms=1)
    e.patches.update(BEFORE)
    srv = TCPServer(e)
    yield e, srv.port
    srv.close()


def _ocs(port, **kw):
    return OCS(name="ocs1", size={"inputs": 48, "outputs": 48},
               transports=[{"kind": "tcp", "address": "127.0.0.1", "port": port}], password_env="OCS_PW", **kw)


def _inv(port, name="lab", transports=None):
    """The little of an inventory that open_ocs reads: name, source, base_dir, ssh and the OCS (ocs, ocses)."""
    ocs = OCS(name="ocs1", size={"inputs": 48, "outputs": 48}, password_env="OCS_PW",
              transports=transports or [{"kind": "tcp", "address": "127.0.0.1", "port": port}])
    return type("Inv", (), {"name": name, "source": None, "base_dir": None, "ocs": ocs, "ocses": [ocs],
                            "ssh": type("S", (), {"known_hosts": None, "host_key_policy": "strict"})()})


# --- 1. TL1 injection ---------------------------------------------------------------------
@pytest.mark.parametrize("c", RESERVED_AND_CONTROL)
def test_every_reserved_character_through_every_field_is_refused_and_never_sent(c):
    cases = {
        "TID": dict(tid=f"OCS{c}1"),
        "AID": dict(aid=f"1{c}DLT-PATCH" if c not in "&," else f"1{c}{c}{c}"),
        "parameters": dict(params=f"PARAMETER=SI{c}ZE"),
        "password": dict(params=f"ab{c}cd", secret=True),
    }
    for field, kw in cases.items():
        with pytest.raises(tl1.TL1FieldError) as e:
            tl1.encode("RTRV-PATCH", "1", **kw)
        assert e.value.exit_code == 3 and field.lower() in str(e.value).lower()
        if field == "password":
            assert "ab" not in str(e.value) and "cd" not in str(e.value)  # position, never the value
    for field, fn in (("ocs.user", tl1.check_ident), ("label", tl1.check_text)):
        with pytest.raises(tl1.TL1FieldError, match=field):
            fn(field, f"admin{c}x")


def test_a_hostile_user_is_refused_by_the_schema_and_never_reaches_the_switch(emu, tmp_path, cli_env):
    e, port = emu
    rec = Recorder(e)
    evil = "admin;DLT-PATCH::ALL:9;ACT-USER::admin"
    with pytest.raises(ValueError, match="(?s)user.*the reserved character ';'"):
        _ocs(port, user=evil)
    # a model built around the schema (another caller, a cached copy): the codec still refuses
    bad = _ocs(port).model_copy(update={"user": evil})
    with pytest.raises(ConfigError, match="ocs.user"):
        OCSDriver(bad, command_timeout=2).connect()
    assert e.patches == BEFORE and rec.verbs() == []  # refused before anything was opened or sent
    # and `inventory validate` says so, exit 3, naming the field
    src = ROOT / "inventory" / "mfabric-prototype.yaml"
    inv = tmp_path / "inv.yaml"
    inv.write_text(src.read_text().replace("  user: admin\n", f"  user: '{evil}'\n", 1))
    assert evil in inv.read_text()
    r = subprocess.run(mfctl_cmd("inventory", "validate", inv), capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 3 and "ocs.user" in r.stderr and "';'" in r.stderr, r.stderr


@pytest.mark.parametrize("pw,why", [("ab;cd", "reserved character ';'"), ("pässwörd", "non-ASCII"),
                                    ("ab\ncd", "control character")])
def test_a_bad_password_is_a_clear_error_not_two_commands_nor_a_traceback(emu, monkeypatch, pw, why):
    e, port = emu
    rec = Recorder(e)
    monkeypatch.setenv("OCS_PW", pw)
    with pytest.raises(ConfigError) as err:
        OCSDriver(_ocs(port), command_timeout=2).connect()
    assert why in str(err.value) and "$OCS_PW" in str(err.value) and pw not in str(err.value)
    assert "ACT-USER" not in rec.verbs() and "CD" not in rec.verbs()


# --- 2. confirmed reads -------------------------------------------------------------------
@pytest.mark.parametrize("n", range(1, 41))
def test_a_read_with_dropped_bytes_is_never_trusted(emu, n):
    """Every drop size 1-40 in the middle of RTRV-PATCH's reply: the read returns the switch's
    real state (or refuses), never a wrong but well-formed map."""
    e, port = emu
    e.patches.update({k: 60 + k for k in range(5, 20)})
    truth = dict(e.patches)
    with OCSDriver(_ocs(port), command_timeout=1) as d:
        e.faults.on_verb, e.faults.drop_bytes = "RTRV-PATCH", n
        assert d.cross_connects() == truth
        e.faults.on_verb = None


def test_a_corrupted_before_never_makes_a_phantom_nor_deletes_a_port_not_connected(emu, tmp_path):
    e, port = emu
    rec = Recorder(e)
    e.patches.update({k: 60 + k for k in range(5, 20)})
    truth = dict(e.patches)
    j = Journal(tmp_path / "j.jsonl")
    desired = dict(truth) | {30: 90}
    with OCSDriver(_ocs(port), command_timeout=1, journal=j) as d:
        for n in range(1, 41):
            e.faults.on_verb, e.faults.drop_bytes = "RTRV-PATCH", n
            d.apply(desired if n % 2 else truth, reason=f"drop {n}")
            assert e.patches == (desired if n % 2 else truth)
    e.faults.on_verb = None
    befores = [dict(map(tuple, r["before"])) for r in j.records() if r["op"] == "ocs.intent"]
    assert all(b in (truth, desired) for b in befores)  # every journalled `before` is the real state
    deleted = [int(t.split(":")[2]) for t in rec.seen if t.startswith("DLT-PATCH")]
    assert set(deleted) == {30}  # only the cross-connect that existed


def test_reads_that_never_agree_decide_nothing(emu, monkeypatch):
    e, port = emu
    with OCSDriver(_ocs(port), command_timeout=1) as d:
        flip = iter(range(1000))
        monkeypatch.setattr(d, "read_cross_connects_once", lambda: {1: 49 + next(flip) % 2 * 10})
        with pytest.raises(UnconfirmedRead, match="no two of 5 RTRV-PATCH reads agreed"):
            d.apply({})
    assert e.patches == BEFORE


def test_an_inconsistent_reply_is_refused(emu):
    e, port = emu
    with OCSDriver(_ocs(port), command_timeout=1) as d:
        orig = e._cmd_RTRV_PATCH
        for lines in (["1,49", "1,50"], ["1,49", "2,49"], ["1,200"], ["60,49"], ["1;49"]):
            e._cmd_RTRV_PATCH = lambda ctag, aid, params, s, lines=lines: e.reply(ctag, lines=lines)
            with pytest.raises(UnconfirmedRead):
                d.cross_connects()
        e._cmd_RTRV_PATCH = orig
        assert d.cross_connects() == BEFORE


# --- the fault matrix: every fault ends in exactly `before` or exactly `desired` ----------
FAULTS = {
    "link dropped mid-reply (ENT)": dict(on_verb="ENT-PATCH", die_mid_reply=True),
    "link dropped before executing (DLT)": dict(on_verb="DLT-PATCH", drop_after_command=True),
    "garbled bytes before the reply": dict(on_verb="ENT-PATCH", garble_before_reply=True),
    "timeout, command not applied": dict(on_verb="ENT-PATCH", timeout_next=True),
    "timeout, command applied": dict(on_verb="ENT-PATCH", reply_lost=True),
    "alarm before the reply": dict(on_verb="ENT-PATCH", alarm_before_reply=True),
    "partial apply, COMPLD": dict(partial_apply=1),
    **{f"{n} byte(s) dropped from ENT's reply": dict(on_verb="ENT-PATCH", drop_bytes=n) for n in (1, 7, 20, 40)},
    **{f"{n} byte(s) dropped from the read-back": dict(on_verb="RTRV-PATCH", drop_bytes=n) for n in range(1, 41)},
    "DENY on an added port": dict(deny_ports={52}),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_matrix_ends_in_before_or_desired(emu, tmp_path, fault):
    e, port = emu
    j = Journal(tmp_path / "j.jsonl")
    for k, v in FAULTS[fault].items():
        setattr(e.faults, k, v)
    with OCSDriver(_ocs(port), command_timeout=0.5, connect_timeout=2, journal=j) as d:
        try:
            d.apply(DESIRED, reason=fault)
            outcome = "desired"
        except TL1Deny as err:
            assert err.left == "rolled-back" and "rolled back" in str(err)
            outcome = "before"
        e.faults = type(e.faults)()
        assert d.cross_connects() == e.patches == (DESIRED if outcome == "desired" else BEFORE)
    recs = j.records()
    assert not [r for r in recs if r["op"] in ("corrupt", "torn")] and pending_apply(recs) is None
    assert outcome == ("before" if "DENY" in fault else "desired")


# --- 3. one chain: kill at every record of the apply, then of the recovery -----------------
class Killed(BaseException):
    """Stands for kill -9: nothing of mfctl's handles it (tests/helpers/crash_apply.py does it for real)."""


class CrashingJournal(Journal):
    def __init__(self, path, crash_after):
        super().__init__(path)
        self.left = crash_after

    def append(self, op, **fields):
        rec = super().append(op, **fields)
        self.left -= 1
        if self.left == 0:
            raise Killed(op)
        return rec


def _run_until_killed(port, path, n, fn):
    d = OCSDriver(_ocs(port), command_timeout=2, journal=CrashingJournal(path, n)).connect()
    try:
        fn(d)
        return False
    except Killed:
        return True
    finally:
        d.client.close()  # the process is gone: no logout, the link just drops


APPLY_RECORDS = 7  # intent, DLT sent, DLT COMPLD, ENT sent, ENT COMPLD, verify, outcome


@pytest.mark.parametrize("kill_apply", range(1, APPLY_RECORDS))
@pytest.mark.parametrize("first", ["complete", "rollback"])
def test_kill_at_every_record_of_apply_and_of_its_recovery(emu, tmp_path, kill_apply, first):
    """Kill the apply at record k, then its recovery (``first`` mode) at record 1, 2, ... until
    it runs to the end; after each kill, recover in both modes: exactly ``before`` or exactly
    ``desired``, with nothing pending after."""
    e, port = emu
    kill_recovery, killed = 0, True
    while killed:
        kill_recovery += 1
        for final in ("complete", "rollback"):
            e.patches = dict(BEFORE)
            path = tmp_path / f"j-{kill_recovery}-{final}.jsonl"
            assert _run_until_killed(port, path, kill_apply, lambda d: d.apply(DESIRED, reason="A->B"))
            root = Journal(path).records()[0]["apply_id"]
            recs = Journal(path).records()
            killed = _run_until_killed(port, path, kill_recovery, lambda d, recs=recs: recover(d, recs, mode=first))
            pend = pending_apply(Journal(path).records())
            if pend is None:  # the first recovery ran to its end (or was killed after its last record)
                assert e.patches == (DESIRED if first == "complete" else BEFORE)
                continue
            assert pend["apply_id"] == root and pend["before"] == [list(x) for x in sorted(BEFORE.items())]
            with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
                out = recover(d, Journal(path).records(), mode=final)
                want = DESIRED if final == "complete" else BEFORE
                assert e.patches == want == d.cross_connects() and out["matches"], (kill_recovery, final)
            assert pending_apply(Journal(path).records()) is None
    assert kill_recovery >= 2


def test_a_real_kill_9_of_a_recovery_then_rollback_restores_the_original_before(emu, tmp_path):
    """The issue's repro, with real processes: apply A->B killed after two DLT records,
    recover killed mid-way, then recover --rollback: exactly A, and nothing pending."""
    e, port = emu
    helper = ROOT / "tests" / "helpers" / "crash_apply.py"
    path = tmp_path / "j.jsonl"
    env = dict(os.environ)
    r = subprocess.run([sys.executable, str(helper), str(port), str(path), "3", json.dumps(DESIRED)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 9, r.stderr
    assert e.patches not in (BEFORE, DESIRED)  # half-applied
    r = subprocess.run([sys.executable, str(helper), str(port), str(path), "3", "recover:complete"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 9, r.stderr
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        pend = pending_apply(Journal(path).records())
        assert pend["recoveries"] == 1 and pend["reason"] == "crash test"
        out = recover(d, Journal(path).records(), mode="rollback")
    assert e.patches == BEFORE and out["matches"] and pending_apply(Journal(path).records()) is None


# --- 4. a torn journal tail --------------------------------------------------------------
def test_a_torn_tail_is_sealed_not_glued_and_recovery_still_finds_the_change(emu, tmp_path):
    e, port = emu
    path = tmp_path / "j.jsonl"
    assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B"))  # after DLT COMPLD
    with open(path, "ab") as f:  # the crash was mid-append: half a record, no newline
        f.write(b'{"ts":1,"seq":4,"op":"ocs.command","apply_id":"x","verb":"ENT-PA')
    assert Journal(path).records()[-1]["op"] == "torn"
    j = Journal(path)
    j.append("ocs.note", text="the next writer")
    recs = Journal(path).records()
    ops = [r["op"] for r in recs]
    assert ops[-3:] == ["corrupt", "journal.sealed", "ocs.note"] and recs[-2]["bytes"] == 64
    assert pending_apply(recs)["reason"] == "A->B"  # the half-applied switch is still pending
    with OCSDriver(_ocs(port), command_timeout=2, journal=j) as d:
        recover(d, recs, mode="complete")
    assert e.patches == DESIRED


def test_short_writes_are_completed_and_a_full_disk_stops_the_change_before_the_switch(emu, tmp_path, monkeypatch):
    e, port = emu
    rec = Recorder(e)
    path = tmp_path / "j.jsonl"
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, b: real_write(fd, bytes(b[: max(1, len(b) // 3)])))
    j = Journal(path)
    j.append("ocs.note", text="x" * 500)
    assert Journal(path).records()[0]["text"] == "x" * 500

    def full(fd, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        with pytest.raises(JournalError, match="No space left"):
            d.apply(DESIRED)
    assert e.patches == BEFORE and not {"DLT-PATCH", "ENT-PATCH"} & set(rec.verbs())


def test_a_damaged_record_is_seen_by_its_checksum(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append("ocs.intent", apply_id="a1", before=[[1, 49]], desired=[[1, 50]])
    raw = (tmp_path / "j.jsonl").read_text().replace("[1,50]", "[1,51]")  # still JSON, wrong content
    (tmp_path / "j.jsonl").write_text(raw)
    r = Journal(tmp_path / "j.jsonl").records()[0]
    assert r["op"] == "corrupt" and r["why"] == "checksum mismatch"


# --- 5. device identity, locks -------------------------------------------------------------
def test_lock_and_journal_follow_the_device_not_the_inventory(emu, tmp_path, monkeypatch):
    e, port = emu
    pty = PtyServer(e)
    try:
        a = _inv(port, "lab")
        b = _inv(port, "lab-renamed", [{"kind": "serial", "device": pty.slave_path, "baudrate": 115200}])
        first = open_ocs(a, purpose="ocs apply")
        try:
            monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "other-state"))
            with pytest.raises(LockError, match="ocs apply"):  # renamed, other state dir, other transport
                open_ocs(b, purpose="ocs apply")
            ro = open_ocs(b)  # reading is never locked out
            assert ro.identity.key == first.identity.key and ro.identity.serial == e.serial
            ro.close()
        finally:
            first.close()
        second = open_ocs(b, purpose="ocs apply")  # free again
        assert second.device_journal.path.name == f"ocs-sn-{e.serial}.journal.jsonl"
        second.close()
        other = OCSEmulator(48, 48, sid="OCS1", password=PW)  # same SID, another switch
        assert other.serial != e.serial
    finally:
        pty.close()


def test_a_stale_inventory_does_not_log_into_another_switch(emu, tmp_path):
    e, port = emu
    rec = Recorder(e)
    with pytest.raises(WrongDevice, match="says SID 'OCS1', the inventory says 'OCS9'"):
        OCSDriver(_ocs(port, sid="OCS9"), command_timeout=2).connect()
    assert rec.verbs() == ["RTRV-HDR"]  # refused before the password was sent
    with pytest.raises(WrongDevice, match="serial"):
        OCSDriver(_ocs(port, sid="OCS1", serial="MOCKOTHER1"), command_timeout=2).connect()
    assert e.patches == BEFORE and not {"DLT-PATCH", "ENT-PATCH"} & set(rec.verbs())
    with OCSDriver(_ocs(port, sid="OCS1", serial=e.serial), command_timeout=2) as d:
        assert d.identity.sid == "OCS1" and d.identity.vendor == "POLATIS"


def test_two_mocks_of_one_inventory_share_nothing(tmp_path, cli_env):
    from mfctl import mockctl
    from mfctl.inventory import load_inventory
    from mfctl.ocs.identity import journal_path, known_identity
    from support import PROTOTYPE

    a = mockctl.start(PROTOTYPE, tmp_path / "m1", time_scale=100)
    b = mockctl.start(PROTOTYPE, tmp_path / "m2", time_scale=100)
    try:
        ia, ib = load_inventory(a["inventory"]), load_inventory(b["inventory"])
        assert ia.name != ib.name and ia.ocs.serial != ib.ocs.serial and ia.ocs.sid != ib.ocs.sid
        assert journal_path(known_identity(ia)) != journal_path(known_identity(ib))
        from mfctl.health import baseline_path
        from mfctl.lock import TestbedLock

        assert baseline_path(ia) != baseline_path(ib)  # one mock's NIC counter history is not the other's
        with TestbedLock(ia.name, "a run on mock 1"), TestbedLock(ib.name, "a run on mock 2"):
            pass
        # one mock's journal, pointed at the other: the serial check refuses
        wrong = Path(tmp_path / "wrong.yaml")
        wrong.write_text(Path(a["inventory"]).read_text().replace(ia.ocs.serial, ib.ocs.serial))
        r = subprocess.run(mfctl_cmd("ocs", "show", "-i", wrong), capture_output=True, text=True, env=cli_env, timeout=60)
        assert r.returncode == 3 and "serial" in r.stderr and "not the switch" in r.stderr
    finally:
        mockctl.stop(tmp_path / "m1")
        mockctl.stop(tmp_path / "m2")


# --- 6. secrets: an echoing console -------------------------------------------------------
def test_login_works_on_an_echoing_console_and_the_password_is_nowhere(monkeypatch, caplog):
    monkeypatch.setenv("OCS_PW", PW)
    e = OCSEmulator(48, 48, sid="OCS1", password=PW, base_ms=2, echo=True)
    e.patches.update(BEFORE)
    pty = PtyServer(e)
    ocs = OCS(name="ocs1", size={"inputs": 48, "outputs": 48}, password_env="OCS_PW",
              transports=[{"kind": "serial", "device": pty.slave_path, "baudrate": 115200}])
    try:
        caplog.set_level(logging.DEBUG, logger="mfctl.ocs.client")
        with OCSDriver(ocs, command_timeout=1) as d:
            assert d.cross_connects() == BEFORE
            d.apply(DESIRED)
            e.faults.on_verb, e.faults.timeout_next = "RTRV-PATCH", True
            from mfctl.ocs.client import TL1Timeout

            with pytest.raises(TL1Timeout) as err:  # its "last read" holds the echoed ACT-USER
                d.client.command("RTRV-PATCH", timeout=0.5)
            e.faults.on_verb = None
            assert PW not in str(err.value) and PW not in "".join(d.client.garbage)
        assert e.patches == DESIRED
        assert PW not in caplog.text and "ACT-USER" in caplog.text
    finally:
        pty.close()


def test_a_failed_change_reverted_by_its_caller_stays_one_chain(emu, tmp_path):
    """A read-back that still differs (here: a silent partial apply, no retries left) raises with
    the change's chain; revert() rolls back inside that chain and closes it."""
    e, port = emu
    j = Journal(tmp_path / "j.jsonl")
    e.faults.partial_apply = 1
    with OCSDriver(_ocs(port), command_timeout=2, journal=j, retries=0) as d:
        with pytest.raises(Exception) as err:
            d.apply(DESIRED, reason="A->B")
        assert "read-back differs" in str(err.value) and e.patches not in (BEFORE, DESIRED)
        assert pending_apply(j.records())["apply_id"] == err.value.chain["apply_id"]
        d.revert(err.value.chain, reason="caller's rollback")
    recs = j.records()
    assert e.patches == BEFORE and pending_apply(recs) is None
    assert [r["chain"] for r in recs if r["op"] == "ocs.intent" and r.get("chain")] == [err.value.chain["apply_id"]]


def test_the_nth_ent_patch_can_be_denied(emu):
    e, port = emu
    e.faults.deny_patch_numbers = {2}
    with OCSDriver(_ocs(port), command_timeout=2) as d:
        d.apply(DESIRED)
        with pytest.raises(TL1Deny, match="ENT-PATCH 2"):
            d.apply({**DESIRED, 5: 60})
    assert e.patches == DESIRED


def test_a_switch_silent_before_login_is_identified_by_the_login_reply(emu):
    e, port = emu
    e.faults.timeout_verb = "RTRV-HDR"
    with OCSDriver(_ocs(port, sid="OCS1"), command_timeout=2, connect_timeout=0.5) as d:
        assert d.identity.sid == "OCS1" and d.cross_connects() == BEFORE
    e.faults.timeout_verb = "RTRV-HDR"
    with pytest.raises(WrongDevice, match="says SID 'OCS1'"):
        OCSDriver(_ocs(port, sid="OCS7"), command_timeout=2, connect_timeout=0.5).connect()


# --- found by a new user's trial ---------------------------------------------------------------
@pytest.mark.parametrize("value", ["admin\n", "admin\r", "OCS1\n"])
def test_a_trailing_newline_is_no_identifier(value):
    with pytest.raises(tl1.TL1FieldError):
        tl1.check_ident("ocs.user", value)
    with pytest.raises(ValueError):
        OCS(name="o", size={"inputs": 4, "outputs": 4}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}],
            user=value)


def test_lanes_and_ports_are_ascii():
    from mfctl.errors import UsageError
    from mfctl.ocs.service import PortMap, cross_connects_for, parse_endpoint

    pm = PortMap({}, {}, {}, {}, 48, 48)
    for text in ("１", "²", "١٢", "gpu01/nic0.0\n", "gpu01/nic0.²"):
        with pytest.raises(UsageError):
            parse_endpoint(pm, text)
    with pytest.raises(UsageError):
        cross_connects_for(pm, "１", "50")
    assert cross_connects_for(pm, "1", "50") == {1: 50}


def test_the_lock_dir_cannot_be_used_to_overwrite_files(tmp_path, monkeypatch):
    from mfctl.lock import DeviceLock, lock_dir

    d = tmp_path / "locks"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.chmod(victim, 0o600)
    monkeypatch.setenv("MFCTL_LOCK_DIR", str(d))
    (d / "ocs-sn-X.holder.json").symlink_to(victim)
    (d / "ocs-sn-X.last.json").symlink_to(victim)
    with DeviceLock("ocs-sn-X", "ocs apply") as lk:
        lk.note_change("abc", tmp_path / "j.jsonl")
    assert victim.read_text() == "precious"
    os.chmod(d, 0o777)  # world-writable without the sticky bit: anyone could plant files
    with pytest.raises(ConfigError, match="sticky"):
        lock_dir()
    os.chmod(d, 0o1777)
    assert lock_dir() == d
    link = tmp_path / "link"
    link.symlink_to(d)
    monkeypatch.setenv("MFCTL_LOCK_DIR", str(link))
    with pytest.raises(ConfigError, match="a link"):
        lock_dir()


def test_a_damaged_intent_is_never_taken_for_nothing_to_recover(emu, tmp_path):
    from mfctl.ocs.driver import JournalDamaged, check_journal_readable, journal_problems

    e, port = emu
    path = tmp_path / "j.jsonl"
    j = Journal(path)
    with OCSDriver(_ocs(port), command_timeout=2, journal=j) as d:
        d.apply(BEFORE | {5: 60}, reason="an earlier change, finished")
    assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B"))
    lines = path.read_text().splitlines(keepends=True)
    k = max(i for i, ln in enumerate(lines) if '"op":"ocs.intent"' in ln)
    lines[k] = lines[k].replace('"reason":"A->B"', '"reason":"A-<B"')  # one byte changed in place
    path.write_text("".join(lines))
    recs = Journal(path).records()
    assert pending_apply(recs) is None  # the readable part says every change finished ...
    assert [r["op"] for r in journal_problems(recs)][:1] == ["corrupt"]
    with pytest.raises(JournalDamaged, match="cannot tell whether a change is unfinished"):
        check_journal_readable(recs)  # ... and recover says it cannot tell, not "nothing to recover"
    del lines[k]  # the intent gone altogether: its commands are orphans
    path.write_text("".join(lines))
    with pytest.raises(JournalDamaged):
        check_journal_readable(Journal(path).records())


@pytest.mark.parametrize("bad", ['"ts":"now"', '"apply_id":{"x":1}', '"desired":[["a","b"]]'])
def test_a_record_without_checksum_is_checked_field_by_field(tmp_path, bad):
    path = tmp_path / "j.jsonl"
    path.write_text('{"seq":1,"op":"ocs.intent","apply_id":"a","before":[],"desired":[],' + bad + '}\n')
    r = Journal(path).records()[0]
    assert r["op"] == "corrupt" and "not" in r["why"]
    from mfctl.ocs.service import journal_rows
    assert journal_rows(Journal(path).records(), 10)[0]["summary"].startswith("DAMAGED")


def test_applying_over_an_interrupted_change_joins_its_chain(emu, tmp_path):
    """Kill apply A->B, apply B again (the natural move) and kill that too: rollback still goes to A."""
    e, port = emu
    path = tmp_path / "j.jsonl"
    assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B"))
    half = dict(e.patches)
    assert half not in (BEFORE, DESIRED)

    def again(d):
        d.pending = pending_apply(Journal(path).records())  # as open_ocs reads it
        d.apply(DESIRED | {7: 70}, reason="A->B, again")

    assert _run_until_killed(port, path, 3, again)
    recs = Journal(path).records()
    pend = pending_apply(recs)
    assert pend["reason"] == "A->B" and pend["before"] == [list(x) for x in sorted(BEFORE.items())]
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        recover(d, recs, mode="rollback")
    assert e.patches == BEFORE
    # and an apply that runs to its end closes the chain it joined
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B #3"))
        d.pending = pending_apply(Journal(path).records())
        d.apply(DESIRED, reason="finish it")
    assert pending_apply(Journal(path).records()) is None and e.patches == DESIRED


def test_an_unfinished_change_overtaken_from_another_state_dir_is_not_resurrected(emu, tmp_path, monkeypatch):
    from mfctl.ocs.driver import Superseded

    e, port = emu

    Inv = _inv(port)

    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "A"))
    a = open_ocs(Inv, purpose="ocs apply (A)")
    a.journals = [CrashingJournal(a.device_journal.path, 3)]
    a.device_journal = a.journals[0]
    with pytest.raises(Killed):
        a.apply(DESIRED, reason="A->B in state dir A")
    a.client.close()
    a.client = None
    a.close()
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "B"))
    with open_ocs(Inv, purpose="ocs apply (B)") as b:
        assert b.pending is None  # its own journal knows nothing
        b.apply(BEFORE, reason="back to A, from state dir B")
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "A"))
    with open_ocs(Inv, purpose="ocs recover (A)") as c:
        assert c.pending is None  # superseded: not continued by the next apply either
        recs = c.device_journal.records()
        assert pending_apply(recs)["reason"] == "A->B in state dir A"
        with pytest.raises(Superseded, match="the switch was changed after it"):
            recover(c, recs, mode="complete")
    assert e.patches == BEFORE


def test_reading_a_big_journal_parses_nothing_and_a_big_one_is_rotated(tmp_path):
    import time as _time

    from mfctl.ocs.journal import encode_record

    path = tmp_path / "j.jsonl"
    with open(path, "w") as f:  # 20 MB of history
        f.writelines(encode_record({"ts": 1.0, "seq": k, "op": "ocs.note", "text": "x" * 1000}) for k in range(1, 20001))
    t = _time.perf_counter()
    Journal(path).append("ocs.note", text="last")
    assert _time.perf_counter() - t < 0.2  # the seq comes from the tail, not a parse of 20 MB
    assert Journal(path).records()[-1]["seq"] == 20001
    old = Journal(path).rotate_if_large(limit=1 << 20)
    assert old.name == "j.1.jsonl" and not path.exists()
    j3 = Journal(path)
    j3.append("ocs.note", text="after rotation")
    assert [r["seq"] for r in j3.records()] == [1]


def test_a_password_file_that_is_not_text_is_a_config_error(tmp_path):
    pw = tmp_path / "pw"
    pw.write_bytes(b"\xff\xfe\x00")
    o = OCS(name="o", size={"inputs": 4, "outputs": 4}, transports=[{"kind": "tcp", "address": "127.0.0.1", "port": 1}],
            password_file=str(pw))
    with pytest.raises(ConfigError, match="not ASCII"):
        o.password()
    o2 = o.model_copy(update={"password_file": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="cannot read"):
        o2.password()


@pytest.mark.parametrize("line", [
    '{"seq":9,"op":"ocs.intent","apply_id":"a","before":[],"desired":[],"diff":"lots"}',
    "[" * 100000 + "]" * 100000,
    '{"seq":' + "9" * 5000 + ',"op":"ocs.note"}',
    '{"seq":9,"op":"ocs.outcome","apply_id":"a","ok":"false"}',
    '{"seq":9,"op":"ocs.intent","op":"ocs.outcome","apply_id":"a","ok":true}',
    '{"seq":9,"op":"ocs.intent","apply_id":"a","before":[],"desired":[[1,49],[1,50]]}',
])
def test_hand_written_records_are_damage_not_tracebacks_nor_trusted(tmp_path, line):
    from mfctl.ocs.service import journal_rows

    path = tmp_path / "j.jsonl"
    path.write_text(line + "\n")
    recs = Journal(path).records()
    assert recs[0]["op"] == "corrupt"
    assert journal_rows(recs, 5)[0]["summary"].startswith("DAMAGED")


def test_a_switch_changed_by_someone_else_is_not_recovered_over_even_without_the_marker(emu, tmp_path):
    from mfctl.ocs.driver import Superseded

    e, port = emu
    path = tmp_path / "j.jsonl"
    assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B"))
    e.patches[30] = 90  # another tool, another state dir, after a reboot emptied /run/lock
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        with pytest.raises(Superseded, match="neither its state before nor its desired"):
            recover(d, Journal(path).records(), mode="rollback")
    assert e.patches[30] == 90


def test_another_goal_over_an_interrupted_change_still_rolls_back_to_the_original(emu, tmp_path):
    e, port = emu
    path = tmp_path / "j.jsonl"
    assert _run_until_killed(port, path, 3, lambda d: d.apply(DESIRED, reason="A->B"))

    def other_goal(d):
        d.pending = pending_apply(Journal(path).records())
        d.apply({1: 49, 5: 60, 6: 61}, reason="A->C over the half of A->B")

    assert _run_until_killed(port, path, 5, other_goal)
    with OCSDriver(_ocs(port), command_timeout=2, journal=Journal(path)) as d:
        recover(d, Journal(path).records(), mode="rollback")
    assert e.patches == BEFORE


def test_a_journal_cut_before_the_devices_latest_change_cannot_say_nothing_to_recover(emu, tmp_path):
    from mfctl.ocs.driver import JournalDamaged, check_journal_readable

    e, port = emu

    Inv = _inv(port)

    with open_ocs(Inv, purpose="ocs apply") as d:
        d.apply(BEFORE | {5: 60}, reason="first")
        path = d.device_journal.path
    a = open_ocs(Inv, purpose="ocs apply")
    a.journals = [CrashingJournal(path, 2)]
    a.device_journal = a.journals[0]
    with pytest.raises(Killed):
        a.apply(DESIRED, reason="A->B")
    a.client.close()
    a.client = None
    a.close()
    lines = path.read_text().splitlines(keepends=True)
    k = max(i for i, ln in enumerate(lines) if '"op":"ocs.intent"' in ln)
    path.write_text("".join(lines[:k]))  # cut on a record boundary, just before the last intent
    with open_ocs(Inv, purpose="ocs recover") as d:
        recs = d.device_journal.records()
        assert pending_apply(recs) is None
        with pytest.raises(JournalDamaged, match="lost the device's latest change"):
            check_journal_readable(recs, d)


def test_group_writable_lock_dirs_need_the_sticky_bit_and_sighup_is_held(tmp_path, monkeypatch):
    import signal

    from mfctl.lock import lock_dir
    from mfctl.signals import DeferSignals

    d = tmp_path / "gw"
    d.mkdir()
    os.chmod(d, 0o775)
    monkeypatch.setenv("MFCTL_LOCK_DIR", str(d))
    with pytest.raises(ConfigError, match="sticky"):
        lock_dir()
    with pytest.raises(KeyboardInterrupt):
        with DeferSignals():
            os.kill(os.getpid(), signal.SIGHUP)  # a dropped SSH session: held until the change is done
            held = True
    assert held


def test_bidirectional_overrides_are_shown_not_obeyed():
    from mfctl.cli.plain import visible

    assert visible("abc\u202edcba") == "abc\\u202edcba" and visible("ok\n\t") == "ok\n\t"


def test_other_journals_records_keep_their_own_fields(tmp_path):
    j = Journal(tmp_path / "provision.jsonl")
    j.append("provision.action", host="gpu01", before={"LINK_TYPE_P1": "ETH"}, after="2x100G", state="start")
    assert Journal(tmp_path / "provision.jsonl").records()[0]["op"] == "provision.action"


def test_an_ssh_targets_password_is_in_no_repr():
    from mfctl.transport.ssh import SSHTarget

    t = SSHTarget(name="ocs1", address="127.0.0.1", password=PW)
    assert PW not in repr(t) and PW not in str(t) and t.password == PW
