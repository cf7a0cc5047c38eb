"""The Redis backend against a real redis-server on 127.0.0.1: a holder killed with -9 (the lock is
free when its lease expires), a network partition (server paused, then killed: the holder says it
cannot renew and stops before its lease ends), the password from the environment only."""

import json
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from peers_redis import ROOT, holder_code, spawn, start_redis

from mfctl.errors import ConfigError, LockError, UnreachableError
from mfctl.inventory.models import LockBackend
from mfctl.lock import LockLost, Refused, testbed_lock


def _inv(srv, name="tb", **kw):
    return SimpleNamespace(name=name, lock=LockBackend(backend="redis", url=srv.url, **kw), base_dir=None)


def test_a_holder_killed_with_9_loses_the_lock_when_its_lease_expires(redis_server):
    ttl = 2.0
    p = spawn(holder_code({"backend": "redis", "url": redis_server.url}, "tb", "a CI job", ttl=ttl))
    try:
        assert p.stdout.readline().split()[0] == "held", p.stderr.read()[-2000:]
        time.sleep(1.0)  # renewed at ttl/3 = 0.67 s: the lease now ends ~2 s after that
        lease = testbed_lock(_inv(redis_server), "after", token="")
        st = lease.status()
        assert st["state"] == "held" and st["holder"]["pid"] == p.pid and st["holder"]["purpose"] == "a CI job"
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        killed = time.monotonic()
        st = lease.status()  # the pid is gone on this machine: stale at once, free only at lease expiry
        assert st["state"] == "stale" and not st["available"] and f"pid {p.pid}" in st["stale"]
        with pytest.raises(Refused, match=f"locked by pid {p.pid} .* for 'a CI job'"):
            lease.acquire()
        lease.timeout, lease.poll_s = 10.0, 0.01
        lease.acquire()
        waited = time.monotonic() - killed
        print(f"redis: lock free {waited:.3f} s after kill -9 (ttl {ttl} s, renewed every {ttl / 3:.2f} s)")
        assert ttl - ttl / 3 - 0.35 <= waited <= ttl + 0.3, waited  # between the last renewal's lease end and a ttl
        assert lease.holder()["pid"] != p.pid
        lease.release()
        assert lease.status()["state"] == "free"
    finally:
        p.kill()
        p.wait(10)


def test_an_expired_lease_without_a_release_is_stale_in_status(redis_server):
    lk = testbed_lock(_inv(redis_server), "a script", ttl=1, detached=True, token="").acquire()
    token = lk.token
    time.sleep(1.2)
    st = testbed_lock(_inv(redis_server), "status", token="").status()
    assert st["state"] == "stale" and st["available"] and "without a release" in st["stale"]
    assert st["holder"]["purpose"] == "a script"
    with pytest.raises(LockLost, match="no longer held"):
        testbed_lock(_inv(redis_server), "renew", token="").renew(token, 5)
    with testbed_lock(_inv(redis_server), "next", token="") as nxt:
        assert nxt.status()["state"] == "held"
    assert testbed_lock(_inv(redis_server), "status", token="").status()["state"] == "free"  # a release clears it


def test_a_partition_makes_the_holder_stop_before_its_lease_ends(redis_server):
    """The server paused (SIGSTOP: it answers nothing, as behind a partition): the renewer's
    commands time out; with a third of the lease left it declares the lease lost (on_lost) — before
    anyone else could have it. Resumed after the lease's end, the server has freed it; the lost
    holder's release touches nothing of the next holder's."""
    ttl = 1.5
    lost: list[tuple[float, str]] = []
    lk = testbed_lock(_inv(redis_server, timeout_s=0.2), "a run", ttl=ttl, token="",
                      on_lost=lambda m: lost.append((time.monotonic(), m)))
    lk.acquire()
    time.sleep(0.6)  # one renewal done (at 0.5 s)
    last_renew_by = time.monotonic()
    redis_server.pause()
    paused = time.monotonic()
    try:
        assert lk.lost.wait(ttl + 1), "the holder never noticed"
        deadline = time.monotonic() + 2
        while not lost and time.monotonic() < deadline:  # (on_lost is called just after lost is set)
            time.sleep(0.01)
        t, msg = lost[0]
        print(f"redis partition: lease declared lost {t - paused:.3f} s after the server stopped answering (ttl {ttl} s)")
        assert "cannot renew the lease" in msg and "redis://127.0.0.1" in msg and "stopping" in msg
        assert t < last_renew_by + ttl  # before the lease could have ended
        with pytest.raises(LockLost):
            lk.check()
        time.sleep(max(0.0, last_renew_by + ttl + 0.2 - time.monotonic()))
    finally:
        redis_server.resume()
    other = testbed_lock(_inv(redis_server), "the next holder", token="").acquire()
    assert lk.release() is False  # its token no longer holds it: nothing of the new holder's is removed
    assert other.holder()["purpose"] == "the next holder"
    other.release()


def test_the_command_holding_it_fails_safe_when_the_server_goes(redis_server):
    """A process holding the lock (default on_lost) is interrupted — as Ctrl-C — when it cannot
    renew: it does not carry on believing it holds the lock."""
    code = ("import sys, time, json\n"
            "from types import SimpleNamespace\n"
            "from mfctl.inventory.models import LockBackend\n"
            "from mfctl.lock import testbed_lock\n"
            f"inv = SimpleNamespace(name='tb', lock=LockBackend(backend='redis', url={redis_server.url!r}, timeout_s=0.2), "
            "base_dir=None)\n"
            "lk = testbed_lock(inv, 'a long change', ttl=1.5, token='')\n"
            "try:\n"
            "    with lk:\n"
            "        print('held', flush=True)\n"
            "        for i in range(600):\n"
            "            time.sleep(0.05)  # the work, done while the lease is held\n"
            "    print('carried on', flush=True)\n"
            "except KeyboardInterrupt:\n"
            "    print('stopped:', lk.lost.is_set(), lk.lost_reason, flush=True)\n"
            "    sys.exit(5)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "held", p.stderr.read()[-2000:]
        t0 = time.monotonic()
        redis_server.stop()  # the server gone: connections refused
        out, err = p.communicate(timeout=15)
        print(f"redis gone: the holder stopped {time.monotonic() - t0:.2f} s later")
        assert p.returncode == 5, (out, err)
        assert out.startswith("stopped: True ") and "cannot renew the lease" in out and "carried on" not in out
        assert "cannot renew the lease" in err  # said on its log too (stderr here)
    finally:
        p.kill()
        p.wait(10)


def test_unreachable_server_is_exit_4_naming_the_redacted_url(tmp_path):
    from peers_redis import free_port

    inv = SimpleNamespace(name="tb", lock=LockBackend(backend="redis", url=f"redis://127.0.0.1:{free_port()}/0",
                                                      timeout_s=0.5), base_dir=None)
    with pytest.raises(UnreachableError, match=r"lock service at redis://127\.0\.0\.1:\d+/0 cannot be reached") as e:
        testbed_lock(inv, "x", token="").acquire()
    assert e.value.exit_code == 4


def test_the_password_comes_from_the_environment_and_is_never_shown(tmp_path, monkeypatch):
    pw = "s3cret-lock-pw"
    srv = start_redis(tmp_path, password=pw)
    try:
        inv = SimpleNamespace(name="tb", lock=LockBackend(backend="redis", url=srv.url, password_env="TEST_LOCK_PW"),
                              base_dir=None)
        monkeypatch.delenv("TEST_LOCK_PW", raising=False)
        with pytest.raises(ConfigError) as e:  # no password: the server refuses
            testbed_lock(inv, "x", token="").acquire()
        assert "TEST_LOCK_PW" in str(e.value) and pw not in str(e.value)
        monkeypatch.setenv("TEST_LOCK_PW", "wrong")
        with pytest.raises(ConfigError, match="refused the password"):
            testbed_lock(inv, "x", token="").acquire()
        monkeypatch.setenv("TEST_LOCK_PW", pw)
        with testbed_lock(inv, "with the password", token="") as lk:
            st = lk.status()
            assert st["state"] == "held" and pw not in json.dumps(st) and lk.token not in json.dumps(st)
        pwfile = tmp_path / "pw"
        pwfile.write_text(pw + "\n")
        monkeypatch.delenv("TEST_LOCK_PW")
        inv.lock = LockBackend(backend="redis", url=srv.url, password_file=str(pwfile))
        with testbed_lock(inv, "with the password file", token=""):
            pass
    finally:
        srv.stop()


def test_a_token_borrows_the_lease_in_another_process(redis_server):
    with testbed_lock(_inv(redis_server), "a pytest session", token="") as lk:
        code = ("import json; from types import SimpleNamespace\n"
                "from mfctl.inventory.models import LockBackend\nfrom mfctl.lock import testbed_lock\n"
                f"inv = SimpleNamespace(name='tb', lock=LockBackend(backend='redis', url={redis_server.url!r}), base_dir=None)\n"
                "with testbed_lock(inv, 'a run it started') as l:\n    print(l.borrowed)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT,
                           env={**__import__("os").environ, "MFCTL_LOCK_TOKEN": lk.token})
        assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
        assert lk.holder()["purpose"] == "a pytest session"  # the borrower released nothing
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT,
                           env={**__import__("os").environ, "MFCTL_LOCK_TOKEN": "not-the-token"})
        assert r.returncode != 0 and "is locked by pid" in r.stderr and "a pytest session" in r.stderr


def test_a_borrower_keeps_the_lease_alive_never_shorter_and_loses_it_with_its_owner(redis_server):
    owner = testbed_lock(_inv(redis_server), "a script", ttl=1.0, detached=True, token="").acquire()
    lost = []
    run = testbed_lock(_inv(redis_server), "a run under it", ttl=1.0, token=owner.token, on_lost=lost.append).acquire()
    assert run.borrowed
    time.sleep(2.0)
    st = testbed_lock(_inv(redis_server), "status", token="").status()
    assert st["state"] == "held" and st["holder"]["purpose"] == "a script" and not run.lost.is_set()
    run.release()
    assert testbed_lock(_inv(redis_server), "status", token="").status()["state"] == "held"  # not released by it
    assert owner.release(owner.token)
    long = testbed_lock(_inv(redis_server), "a long script", ttl=30, detached=True, token="").acquire()
    short = testbed_lock(_inv(redis_server), "short borrower", ttl=1.0, token=long.token, on_lost=lost.append).acquire()
    short.renew()
    assert testbed_lock(_inv(redis_server), "status", token="").status()["expires_in_s"] > 25
    testbed_lock(_inv(redis_server), "force", token="").force_release()
    assert short.lost.wait(2)
    time.sleep(0.2)
    assert "no longer held" in lost[-1]
    short.release()


def test_release_by_force_and_a_refusal_names_the_holder(redis_server):
    holder = testbed_lock(_inv(redis_server), "nightly HIL", reason="firmware soak", ttl=30, detached=True,
                          token="").acquire()
    with pytest.raises(Refused) as e:
        testbed_lock(_inv(redis_server), "ocs apply", token="").acquire()
    assert e.value.exit_code == 5 and "for 'nightly HIL'" in str(e.value) and "reason 'firmware soak'" in str(e.value)
    assert e.value.to_dict()["holder"]["reason"] == "firmware soak"
    gone = testbed_lock(_inv(redis_server), "force", token="").force_release()
    assert gone["purpose"] == "nightly HIL"
    assert testbed_lock(_inv(redis_server), "status", token="").status()["state"] == "free"
    with pytest.raises(LockError):
        holder.renew()


def test_the_renewer_keeps_a_lease_alive_past_its_ttl(redis_server):
    with testbed_lock(_inv(redis_server), "long", ttl=1.0, token="") as lk:
        time.sleep(2.5)
        st = lk.status()
        assert st["state"] == "held" and 0.3 < st["expires_in_s"] <= 1.0
        assert not lk.lost.is_set()
    assert threading.active_count() >= 1
