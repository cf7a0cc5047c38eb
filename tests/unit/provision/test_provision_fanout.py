"""Provisioning's fan-outs go through SSHPool.map: host order, the observer's events, and per-host
outcomes whose Results give plan's, apply's and firmware check's exit codes (DESIGN §9)."""

from types import SimpleNamespace

import pytest

from mfctl.errors import ExitCode, UnreachableError
from mfctl.observer import RecordingObserver
from mfctl.provision import service
from mfctl.provision.models import FirmwareManifest
from mfctl.transport.results import Results
from mfctl.transport.ssh import CommandResult, SSHPool
from support import DATA

SWITCH = (DATA / "mellanox" / "mlxfwmanager-query-spectrum-switch.txt").read_text()
BURNT = SWITCH.replace("     FW             13.1703.0000   N/A           \n",
                       "     FW             13.2000.0000   N/A           \n     FW (Running)   13.1703.0000\n")


class Pool:
    """A pool whose hosts answer from a table: host → stdout of mlxfwmanager, or an exception."""

    fanout = 2

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.ran = []

    def map(self, hosts, fn, **kw):
        return SSHPool.map(self, hosts, fn, **kw)

    def run(self, host, argv, timeout=None):
        self.ran.append((host, argv[0]))
        return CommandResult(host, list(argv), rc=0)

    def run_checked(self, host, argv, timeout=None):
        a = self.answers[host]
        if isinstance(a, Exception):
            raise a
        return a


def inventory(*names):
    hosts = [SimpleNamespace(name=n) for n in names]
    return SimpleNamespace(hosts=hosts, host=lambda n: next(h for h in hosts if h.name == n))


def action(what="MTU"):
    return service.Action("links", "ens1", what, "1500", "9000", [["ip", "link", "set", "dev", "ens1", "mtu", "9000"]])


@pytest.fixture
def planned(monkeypatch):
    """plan() over fake reads: ``down`` cannot be read, ``drift`` has an action, ``ok`` none."""
    def read(pool, h):
        if h.name.startswith("down"):
            raise UnreachableError(f"{h.name}: cannot connect to 127.0.0.1:1: Connection refused")
        return h.name

    from mfctl.provision import plan as planning

    monkeypatch.setattr(planning, "read_actual", read)
    monkeypatch.setattr(planning, "plan_host", lambda inv, i, h, spec, m, act: [action()] if act.startswith("drift") else [])


def test_plan_reports_its_phase_and_hosts_and_gives_the_exit_code(planned):
    obs = RecordingObserver()
    plans = service.plan(Pool(), inventory("ok1", "drift1", "down1"), None, None, observer=obs)
    assert [p.host for p in plans] == ["ok1", "drift1", "down1"]
    assert plans[2].error == "down1: cannot connect to 127.0.0.1:1: Connection refused"  # the text --json has always had
    assert [p.exit_code for p in plans] == [ExitCode.OK, ExitCode.DRIFT, ExitCode.UNREACHABLE]
    assert obs.events[0] == ("phase", "plan", 3)
    assert sorted(e for e in obs.events if e[0] == "host_done") == [
        ("host_done", "down1", 4), ("host_done", "drift1", 6), ("host_done", "ok1", 0)]
    assert Results.of(plans).exit_code() == ExitCode.UNREACHABLE  # an unread host is not "no drift"
    assert Results.of(plans[:2]).exit_code() == ExitCode.DRIFT and Results.of(plans[:1]).exit_code() == ExitCode.OK


def test_apply_then_verify_gives_exit_1_for_anything_left_or_unread(planned, monkeypatch):
    pool, obs = Pool(), RecordingObserver()
    plans = [service.HostPlan("ok1", [action()]), service.HostPlan("drift1", [action()]), service.HostPlan("down1", [])]
    results = service.apply(pool, plans, observer=obs)
    assert [len(r.applied) for r in results] == [1, 1, 0] and all(r.failed is None for r in results)
    assert Results.of(results).exit_code() == ExitCode.FAILED  # applied, not yet verified: never "verified"
    assert sorted(pool.ran) == [("drift1", "ip"), ("ok1", "ip")]
    service.verify(pool, inventory("ok1", "drift1", "down1"), None, None, results, observer=obs)
    assert [r.left != [] for r in results] == [False, True, False]
    assert results[2].verify_error.startswith("down1: cannot connect")
    assert [r.exit_code for r in results] == [ExitCode.OK, ExitCode.FAILED, ExitCode.UNREACHABLE]  # issue 16 item 2
    assert [r.verified for r in results] == [True, False, False]
    assert Results.of(results).exit_code() == ExitCode.UNREACHABLE
    assert [e[1:] for e in obs.events if e[0] == "phase"] == [("apply", 3), ("verify", 3)]
    assert {"host", "ok", "applied", "failed", "elapsed_s", "verified", "verify_error"} <= results[0].to_dict().keys()
    assert results[2].to_dict()["ok"] is False and results[2].to_dict()["verified"] is False


def test_a_host_that_cannot_be_read_is_refused_by_apply_and_fails():
    [r] = service.apply(Pool(), [service.HostPlan("h", error="h: mlxfwmanager --query: exit 1: no mst")])
    assert r.failed == {"step": "read", "error": "h: mlxfwmanager --query: exit 1: no mst"}
    assert r.exit_code == ExitCode.UNREACHABLE  # not read: as plan says it (4)


def test_firmware_check_rows_and_exit_codes():
    manifest = FirmwareManifest(images=[{"part_number": "MSN2410", "psid": "MT_2860112033", "version": "13.1703.0000",
                                         "image": "/fw/a.bin", "sha256": "0" * 64}])
    pool = Pool({"ok": SWITCH, "burnt": BURNT, "down": UnreachableError("down: timed out"), "other": SWITCH.replace(
        "MSN2410-CxxxE_Ax", "MSN9999").replace("MT_2860112033", "MT_1")})
    obs = RecordingObserver()
    checked = service.firmware_check(pool, manifest, ["ok", "burnt", "down", "other"], observer=obs)
    assert [[r["status"] for r in h.rows()] for h in checked] == [["ok"], ["drift"], ["unreachable"], ["no pinned image"]]
    assert checked[2].rows()[0]["error"] == "down: timed out"
    # a NIC nobody pinned an image for is a finding (issue 16 item 8), not silence
    assert [h.exit_code for h in checked] == [ExitCode.OK, ExitCode.DRIFT, ExitCode.UNREACHABLE, ExitCode.DRIFT]
    assert Results.of(checked).exit_code() == ExitCode.UNREACHABLE
    assert Results.of(checked[:2]).exit_code() == ExitCode.DRIFT and obs.events[0] == ("phase", "firmware", 4)
    # burnt but not running: the pinned version waits for a reset
    pinned_new = FirmwareManifest(images=[dict(manifest.images[0].model_dump(), version="13.2000.0000")])
    [h] = service.firmware_check(pool, pinned_new, ["burnt"])
    assert h.rows()[0]["status"] == "reset needed" and h.exit_code == ExitCode.DRIFT
