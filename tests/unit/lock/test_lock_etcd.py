"""The etcd backend against a real etcd on 127.0.0.1: a holder killed with -9 loses the lock when
its lease expires (etcd leases are whole seconds), renew with another length, release, stale."""

import signal
import time
from types import SimpleNamespace

import pytest
from peers_redis import holder_code, spawn, start_etcd

from mfctl.errors import UnreachableError
from mfctl.inventory.models import LockBackend
from mfctl.lock import LockLost, Refused, testbed_lock


@pytest.fixture
def etcd(tmp_path):
    srv = start_etcd(tmp_path)
    yield srv
    srv.stop()


def _inv(srv, **kw):
    return SimpleNamespace(name="tb", lock=LockBackend(backend="etcd", url=srv.url, **kw), base_dir=None)


def test_a_holder_killed_with_9_loses_the_lock_when_its_lease_expires(etcd):
    ttl = 3.0
    p = spawn(holder_code({"backend": "etcd", "url": etcd.url}, "tb", "a CI job", ttl=ttl))
    try:
        assert p.stdout.readline().split()[0] == "held", p.stderr.read()[-2000:]
        time.sleep(1.5)
        lease = testbed_lock(_inv(etcd), "after", token="")
        assert lease.status()["holder"]["pid"] == p.pid
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        killed = time.monotonic()
        st = lease.status()
        assert st["state"] == "stale" and not st["available"]
        with pytest.raises(Refused, match=f"locked by pid {p.pid} .* for 'a CI job'"):
            lease.acquire()
        lease.timeout, lease.poll_s = 15.0, 0.02
        lease.acquire()
        waited = time.monotonic() - killed
        print(f"etcd: lock free {waited:.3f} s after kill -9 (ttl {ttl} s, renewed every {ttl / 3:.2f} s)")
        assert ttl - ttl / 3 - 1.1 <= waited <= ttl + 1.1, waited  # (etcd's lease clock has 1 s steps)
        lease.release()
        assert lease.status()["state"] == "free"
    finally:
        p.kill()
        p.wait(10)


def test_renew_release_and_an_expired_lease_is_stale(etcd):
    lk = testbed_lock(_inv(etcd), "a script", ttl=2, detached=True, reason="soak", token="").acquire()
    other = testbed_lock(_inv(etcd), "status", token="")
    assert other.status()["holder"]["reason"] == "soak"
    assert other.renew(lk.token, 6) - time.time() > 5  # another length: a new lease under the keys
    assert other.status()["expires_in_s"] >= 4
    assert other.release(lk.token) and other.status()["state"] == "free"
    lk = testbed_lock(_inv(etcd), "a script", ttl=1, detached=True, token="").acquire()
    time.sleep(2.5)
    st = other.status()
    assert st["state"] == "stale" and st["available"] and "without a release" in st["stale"]
    with pytest.raises(LockLost):
        other.renew(lk.token, 5)
    with testbed_lock(_inv(etcd), "next", token=""):
        pass
    assert other.status()["state"] == "free"


def test_an_unreachable_etcd_is_exit_4():
    from peers_redis import free_port

    inv = SimpleNamespace(name="tb", lock=LockBackend(backend="etcd", url=f"http://127.0.0.1:{free_port()}", timeout_s=0.5),
                          base_dir=None)
    with pytest.raises(UnreachableError, match="cannot be reached") as e:
        testbed_lock(inv, "x", token="").acquire()
    assert e.value.exit_code == 4
