"""Who uses a mock, as ``mfctl mock down`` names them when it refuses (mockctl.users / who)."""

from __future__ import annotations

import time

from mfctl import mockctl


class _Lease:
    def __init__(self, holder):
        self._h = holder

    def holder(self):
        return self._h


def _users(monkeypatch, holder):
    import mfctl.lock

    monkeypatch.setattr(mockctl, "load_inventory", lambda path: object())
    monkeypatch.setattr(mfctl.lock, "testbed_lock", lambda inv, purpose: _Lease(holder))
    return mockctl.users({"name": "default", "state": "up", "inventory": "/x/inventory.yaml", "owner": None})


def test_a_detached_lease_is_named_as_a_lease_not_by_the_pid_of_the_command_that_took_it(monkeypatch):
    """mfctl lock acquire has exited: its pid says nothing a user can act on; the lease and how to end it do."""
    (u,) = _users(monkeypatch, {"pid": 24942, "detached": True, "reason": "soak test", "since": "2026-12-01T21:00:00",
                                "expires_ts": time.time() + 120, "purpose": "held by a script (mfctl lock acquire)"})
    said = mockctl.who(u)
    assert said.startswith("a lease from mfctl lock acquire (soak test), 1") and "s left (mfctl lock release: its token" in said
    assert "24942" not in said and said.endswith(", since 2026-12-01T21:00:00")


def test_a_live_holder_is_named_with_its_pid(monkeypatch):
    (u,) = _users(monkeypatch, {"pid": 4242, "purpose": "provision apply", "since": "2026-12-01T21:00:00"})
    assert mockctl.who(u) == "provision apply (pid 4242, since 2026-12-01T21:00:00)"
