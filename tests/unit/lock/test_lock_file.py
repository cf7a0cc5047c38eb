"""The testbed lock's embedded backend (a lease in the machine's lock directory), the holder
record, the one refusal message, and the inventory's lock: section."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from peers_redis import ROOT, holder_code, spawn

from mfctl.errors import ConfigError, LockError
from mfctl.inventory.models import LockBackend
from mfctl.lock import LockLost, Refused, lock_path, redact_url, redacted_command, testbed_lock, token_id
from mfctl.lock.lease import ci_job, describe

INV = SimpleNamespace(name="tb", lock=LockBackend())


def test_the_holder_record_says_who_and_never_holds_the_token(monkeypatch):
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    monkeypatch.setenv("GITHUB_JOB", "hil")
    monkeypatch.setenv("GITHUB_REPOSITORY", "lab/mfctl")
    monkeypatch.setattr(sys, "argv", ["/usr/bin/mfctl", "run", "x.yaml", "--token", "T0P", "--password=pw",
                                      "MFCTL_OCS_PASSWORD=pw2", "redis://:pw3@127.0.0.1:6379/0"])
    with testbed_lock(INV, "mfctl run short", reason="nightly", token="") as lk:
        text = lock_path("tb").with_suffix(".holder.json").read_text()
        rec = json.loads(text)
        assert lk.token and lk.token not in text and rec["token_id"] == token_id(lk.token)
        assert rec["pid"] == os.getpid() and rec["purpose"] == "mfctl run short" and rec["reason"] == "nightly"
        assert rec["ci"] == {"system": "github-actions", "run": "4242", "job": "hil", "repository": "lab/mfctl"}
        assert rec["command"] == ("mfctl run x.yaml --token '***' '--password=***' 'MFCTL_OCS_PASSWORD=***' "
                                  "'redis://:***@127.0.0.1:6379/0'")
        for secret in ("T0P", "pw2", "pw3"):
            assert secret not in text
        assert rec["expires_ts"] - rec["since_ts"] == 60.0 and rec["detached"] is False
        assert lk.holder()["pid"] == os.getpid() and lk.status()["state"] == "held"
    assert not lock_path("tb").with_suffix(".holder.json").exists()


def test_ci_job_ids_from_the_environment():
    assert ci_job({"CI_JOB_ID": "7", "CI_PIPELINE_ID": "70", "CI_PROJECT_PATH": "g/p"}) == {
        "system": "gitlab-ci", "run": "70", "job": "7", "repository": "g/p"}
    assert ci_job({"BUILD_TAG": "jenkins-hil-12"}) == {"system": "jenkins", "run": "jenkins-hil-12"}
    assert ci_job({"CI": "true"}) == {"system": "unknown"}
    assert ci_job({}) is None


def test_redaction_of_urls_and_commands():
    assert redact_url("redis://user:pw@10.0.0.1:6379/0") == "redis://user:***@10.0.0.1:6379/0"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redacted_command(["mfctl", "lock", "release", "--token=abc"]) == "mfctl lock release '--token=***'"
    assert redacted_command(["mfctl", "x", "--api-key", "k", "--ttl", "5"]) == "mfctl x --api-key '***' --ttl 5"


def test_a_refusal_names_holder_purpose_since_user_and_lease_in_one_format(tmp_path):
    p = spawn(holder_code({}, "tb", "provision apply by A", ttl=30))
    try:
        assert p.stdout.readline().split()[0] == "held", p.stderr.read()[-2000:]
        with pytest.raises(Refused) as e:
            testbed_lock(INV, "ocs apply", token="").acquire()
        msg = str(e.value)
        assert e.value.exit_code == 5 and isinstance(e.value, LockError)
        assert msg.startswith(f"testbed 'tb' is locked by pid {p.pid} on ") and "for 'provision apply by A' since 20" in msg
        assert "user " in msg and "lease until " in msg and "s left" in msg
        assert e.value.to_dict()["holder"]["pid"] == p.pid
        assert msg.split(" (")[0] == describe("testbed", "tb", e.value.holder).split(" (")[0]  # the module's one format
        t0 = time.monotonic()
        with pytest.raises(Refused):
            testbed_lock(INV, "wait a little", 0.5, token="").acquire()
        assert 0.45 <= time.monotonic() - t0 < 2
    finally:
        p.kill()
        p.wait(10)


def test_a_holder_killed_with_9_frees_the_file_lock_at_once_and_status_says_stale():
    p = spawn(holder_code({}, "tb", "a run", ttl=30))
    try:
        assert p.stdout.readline().split()[0] == "held", p.stderr.read()[-2000:]
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        t0 = time.monotonic()
        lk = testbed_lock(INV, "next", token="")
        st = lk.status()
        assert st["state"] == "stale" and st["available"] and f"pid {p.pid}" in st["stale"]
        lk.acquire()
        dt = time.monotonic() - t0
        print(f"file: lock taken {dt * 1000:.1f} ms after the holder was killed with -9 (its flock went with it)")
        assert dt < 1.0
        lk.release()
    finally:
        p.kill()
        p.wait(10)


def test_a_detached_lease_outlives_its_process_until_it_expires():
    p = subprocess.run([sys.executable, "-c", holder_code({}, "tb", "a script", ttl=10.0, detached=True).replace(
        "time.sleep(120)", "")], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    token = p.stdout.split()[1]
    lk = testbed_lock(INV, "next", token="")
    assert lk.status()["state"] == "held" and lk.holder()["detached"] is True
    with pytest.raises(Refused, match="for 'a script'"):
        lk.acquire()
    assert lk.owns(token)
    lk.renew(token, 1.0)  # renewed by the script (`mfctl lock renew --ttl 1`): a second from now
    time.sleep(1.1)
    st = lk.status()
    assert st["state"] == "stale" and st["available"] and "expired" in st["stale"]
    with pytest.raises(LockLost):
        lk.renew(token, 5)
    with lk:
        assert lk.holder()["purpose"] == "next"
    assert not lk.release(token)  # the old token holds nothing


def test_the_renewer_extends_the_record_and_a_borrower_never_releases():
    with testbed_lock(INV, "long", ttl=1.0, token="") as lk:
        first = lk.holder()["expires_ts"]
        time.sleep(0.8)
        assert lk.holder()["expires_ts"] > first + 0.3
        b = testbed_lock(INV, "a child", token=lk.token).acquire()
        assert b.borrowed and b.token == lk.token
        assert b.renew() >= lk.holder()["expires_ts"] - 0.01  # its owner (holding the flock) renews it
        time.sleep(0.5)
        assert b.release() is False and lk.holder()["purpose"] == "long" and not b.lost.is_set()
    assert testbed_lock(INV, "after", token="").status()["state"] == "free"


def test_a_borrower_keeps_a_scripts_lease_alive_while_it_runs_and_loses_it_with_its_owner():
    """``TOKEN=$(mfctl lock acquire --ttl 1)``, then a long ``MFCTL_LOCK_TOKEN=$TOKEN mfctl run``:
    the run keeps the lease alive (never shorter than it was); released by force, the run loses it."""
    owner = testbed_lock(INV, "a script", ttl=1.0, detached=True, token="").acquire()
    lost = []
    run = testbed_lock(INV, "a run under it", ttl=1.0, token=owner.token, on_lost=lost.append).acquire()
    assert run.borrowed
    time.sleep(2.0)
    st = testbed_lock(INV, "status", token="").status()
    assert st["state"] == "held" and st["holder"]["purpose"] == "a script" and st["expires_in_s"] > 0.3
    assert not run.lost.is_set()
    testbed_lock(INV, "force", token="").force_release()
    assert run.lost.wait(2)
    time.sleep(0.2)  # (on_lost is called just after lost is set)
    assert "no longer held" in lost[0]
    run.release()


def test_a_borrower_never_shortens_the_lease():
    owner = testbed_lock(INV, "a script", ttl=30, detached=True, token="").acquire()
    run = testbed_lock(INV, "short borrower", ttl=1.0, token=owner.token).acquire()
    run.renew()
    assert testbed_lock(INV, "status", token="").status()["expires_in_s"] > 25
    run.release()
    assert owner.release(owner.token)


def test_force_release_refuses_a_live_in_process_holder_and_removes_a_detached_one():
    with testbed_lock(INV, "a run", token=""):
        with pytest.raises(LockError, match="is held by that process"):
            testbed_lock(INV, "force", token="").force_release()
    testbed_lock(INV, "a script", detached=True, ttl=30, token="").acquire()
    gone = testbed_lock(INV, "force", token="").force_release()
    assert gone["purpose"] == "a script"
    assert testbed_lock(INV, "after", token="").status()["state"] == "free"


def _inv_file(tmp_path, lock_yaml: str):
    src = (ROOT / "inventory" / "mfabric-prototype.yaml").read_text()
    p = tmp_path / "inv.yaml"
    p.write_text(src.rstrip("\n") + "\n" + lock_yaml)
    return p, len(src.rstrip("\n").splitlines()) + 1


@pytest.mark.parametrize("lock_yaml, problem", [
    ("lock:\n  backend: redis\n", "needs lock.url"),
    ("lock:\n  backend: redis\n  url: redis://:pw@127.0.0.1:6379/0\n", "must not hold a user or password"),
    ("lock:\n  backend: redis\n  url: ftp://127.0.0.1:6379/0\n", "must be redis://"),
    ("lock:\n  backend: redis\n  url: http://127.0.0.1:2379\n", "http:// is not for lock.backend redis"),
    ("lock:\n  backend: etcd\n  url: redis://127.0.0.1:6379/0\n", "redis:// is not for lock.backend etcd"),
    ("lock:\n  backend: zookeeper\n", "backend"),
    ("lock:\n  url: redis://127.0.0.1:6379/0\n", "is for backend redis"),
    ("lock:\n  backend: redis\n  url: redis://127.0.0.1:6379/0\n  ttl: 5\n", "ttl"),
])
def test_the_inventorys_lock_section_is_validated_with_file_and_line(tmp_path, lock_yaml, problem):
    from mfctl.inventory import load_inventory

    p, line = _inv_file(tmp_path, lock_yaml)
    with pytest.raises(ConfigError) as e:
        load_inventory(p, cached=False)
    assert problem in str(e.value) and str(e.value).startswith(f"{p}:")
    assert "pw@" not in str(e.value)
    lines = [ln for ln, _ in e.value.problems if ln is not None]
    assert lines and all(line <= ln <= line + 3 for ln in lines), (lines, line)


def test_an_inventory_without_a_lock_section_uses_the_file_backend(tmp_path):
    from mfctl.inventory import load_inventory

    inv = load_inventory(ROOT / "inventory" / "mfabric-prototype.yaml")
    assert inv.lock.backend == "file" and testbed_lock(inv, "x").backend == "file"
    p, _ = _inv_file(tmp_path, "lock:\n  backend: redis\n  url: redis://127.0.0.1:6379/0\n  ttl_s: 30\n")
    inv = load_inventory(p, cached=False)
    lk = testbed_lock(inv, "x")
    assert lk.backend == "redis" and lk.ttl == 30 and lk.where() == "redis://127.0.0.1:6379/0"


def test_a_token_whose_lease_ended_is_refused_not_silently_replaced_by_a_new_lock():
    """A script's ``MFCTL_LOCK_TOKEN`` whose lease expired or was released: its commands must learn it
    (they were run to work under that lease), not lock the testbed anew as if nothing happened."""
    from mfctl.lock.lease import LockLost

    owner = testbed_lock(INV, "a script", ttl=30, detached=True, token="").acquire()
    token = owner.token
    assert owner.release(token)
    with pytest.raises(LockLost) as e:
        testbed_lock(INV, "a run under it", token=token).acquire()
    assert "the lease of MFCTL_LOCK_TOKEN" in str(e.value) and "it expired or was released" in str(e.value)
    assert token not in str(e.value) and e.value.exit_code == 5
    assert testbed_lock(INV, "after", token="").status()["state"] == "free"


def test_a_secret_in_the_reason_is_redacted_as_in_the_command():
    from mfctl.lock.lease import holder_record

    rec = holder_record("tb", "mfctl lock acquire", ttl=5, token="t", reason="soak password=hunter2 of gpu03, db_token: x")
    assert rec["reason"] == "soak password=*** of gpu03, db_token: ***" and "hunter2" not in str(rec)
