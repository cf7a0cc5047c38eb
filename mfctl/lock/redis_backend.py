"""The shared backend: a lease in a Redis server that every machine driving the testbed reaches.

Keys (``P`` = ``lock.key_prefix``, ``N`` = the testbed's name):

- ``P:testbed:N`` — the lock: its value is the holder's token, set with ``SET NX PX`` (Redis'
  single-instance lock pattern: https://redis.io/docs/latest/commands/set/), expiring after the
  lease unless renewed;
- ``P:testbed:N:holder`` — the holder record (JSON), with the same expiry;
- ``P:testbed:N:last`` — the last holder's record, kept a day, deleted by a release: found
  without the lock, it says the lease expired without a release (``status`` says stale).

redis-py's :class:`redis.lock.Lock` keeps one key with compare-and-delete / compare-and-extend
Lua scripts; the holder record must live and die with the lock, so the same scripts here cover
both keys in one atomic step. The password comes from ``lock.password_env`` /
``lock.password_file`` (never the URL, argv or logs); every command has ``lock.timeout_s``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mfctl.errors import ConfigError, LockError, UnreachableError
from mfctl.lock.lease import Lease, iso, redact_url, token_id

LAST_KEPT_MS = 86_400_000  #: how long the last holder's record is kept (1 day)

# KEYS: lock, holder, last — ARGV: token, holder JSON, lease ms, last-kept ms
_ACQUIRE = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
  redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[4])
  return 1
end
return 0
"""
# KEYS: lock, holder, last — ARGV: token, lease ms, new holder JSON, last-kept ms, "1" to never shorten it
_EXTEND = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[5] == '1' and redis.call('pttl', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
redis.call('pexpire', KEYS[1], ARGV[2])
redis.call('set', KEYS[2], ARGV[3], 'PX', ARGV[2])
redis.call('set', KEYS[3], ARGV[3], 'PX', ARGV[4])
return 1
"""
# KEYS: lock, holder, last — ARGV: token
_RELEASE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1], KEYS[2], KEYS[3])
return 1
"""


def _password(cfg, base_dir: Path | None) -> str | None:
    if cfg.password_file:
        p = Path(os.path.expanduser(cfg.password_file))
        if base_dir is not None and not p.is_absolute():
            p = base_dir / p
        try:
            if p.exists() and not p.is_file():
                raise ConfigError(f"lock.password_file {p}: not a regular file")
            pw = p.read_bytes()[:4096].decode().strip()
        except UnicodeDecodeError:
            raise ConfigError(f"lock.password_file {p}: not UTF-8 text") from None
        except OSError as e:
            raise ConfigError(f"lock.password_file {p}: cannot read it: {e.strerror or e}") from None
        if not pw:
            raise ConfigError(f"lock.password_file {p}: empty")
        return pw
    if cfg.password_env:
        return os.environ.get(cfg.password_env) or None
    return None


class RedisLease(Lease):
    """A lease kept in Redis (see the module's docstring). ``config``: the inventory's ``lock:``
    section (:class:`mfctl.inventory.models.LockBackend`)."""

    backend = "redis"

    def __init__(self, name: str, purpose: str, *, config, base_dir: Path | None = None, **kw):
        super().__init__(name, purpose, **kw)
        self.config = config
        self.url = config.url
        p = f"{config.key_prefix}:{self.what}:{name}"
        self.keys = [p, f"{p}:holder", f"{p}:last"]
        self._client: Any = None
        self._base_dir = base_dir

    def where(self) -> str:
        return redact_url(self.url or "")

    def client(self):
        """The redis-py client (made once), with the lock's timeouts and password."""
        if self._client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            # one try per command, bounded well inside the lease: the renewer decides, in time, when to give up
            t = min(float(self.config.timeout_s), self.ttl / 4)
            self._client = redis.Redis.from_url(self.url, password=_password(self.config, self._base_dir),
                                                socket_timeout=t, socket_connect_timeout=t, retry=Retry(NoBackoff(), 0),
                                                decode_responses=True, health_check_interval=0)
            self._scripts = {n: self._client.register_script(s) for n, s in
                             (("acquire", _ACQUIRE), ("extend", _EXTEND), ("release", _RELEASE))}
        return self._client

    def _call(self, what: str, fn):
        import redis

        try:
            return fn()
        except redis.AuthenticationError as e:
            raise ConfigError(f"{self.what} {self.name!r}: the lock service at {self.where()} refused the password "
                              f"({type(e).__name__}): set {self.config.password_env or 'lock.password_file'}") from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise UnreachableError(f"{self.what} {self.name!r}: the lock service at {self.where()} cannot be reached "
                                   f"to {what} ({type(e).__name__}: {_safe(e)})") from None
        except redis.ResponseError as e:
            raise LockError(f"{self.what} {self.name!r}: the lock service at {self.where()} answered {_safe(e)}") from None

    def _try_acquire(self, record: dict, token: str) -> bool:
        self.client()
        ms = int(self.ttl * 1000)
        return bool(self._call("take the lock", lambda: self._scripts["acquire"](
            keys=self.keys, args=[token, json.dumps(record), ms, LAST_KEPT_MS])))

    def _extend(self, token: str, ttl: float, keep_longer: bool = False) -> dict | None:
        c = self.client()
        rec = self._call("read the holder", lambda: c.get(self.keys[1]))
        try:
            h = json.loads(rec) if rec else {}
        except ValueError:
            h = {}
        now = time.time()
        h.update(ttl_s=ttl, expires_ts=now + ttl, expires=iso(now + ttl))
        ok = self._call("renew the lease", lambda: self._scripts["extend"](
            keys=self.keys, args=[token, int(ttl * 1000), json.dumps(h), LAST_KEPT_MS, "1" if keep_longer else "0"]))
        return h if ok else None

    def _release(self, token: str) -> bool:
        self.client()
        return bool(self._call("release the lock", lambda: self._scripts["release"](keys=self.keys, args=[token])))

    def _force_release(self) -> None:
        c = self.client()
        self._call("release the lock", lambda: c.delete(*self.keys))

    def _inspect(self) -> dict:
        c = self.client()

        def read():
            pipe = c.pipeline(transaction=True)
            pipe.exists(self.keys[0])
            pipe.pttl(self.keys[0])
            pipe.get(self.keys[1])
            pipe.get(self.keys[2])
            return pipe.execute()

        exists, pttl, holder, last = self._call("read the lock", read)
        rec = _json(holder)
        if exists and rec is None:
            rec = {"purpose": "?", "note": "the lock holds no holder record (not taken by mfctl?)"}
        left = pttl / 1000 if exists and isinstance(pttl, int) and pttl >= 0 else None
        if rec is not None and left is not None:
            rec["expires_ts"] = time.time() + left
            rec["expires"] = iso(rec["expires_ts"])
        if exists and rec is not None and rec.get("token_id") is None:
            tok = c.get(self.keys[0])
            rec["token_id"] = token_id(tok) if tok else None
        return {"record": rec, "present": bool(exists), "expires_in_s": left, "last": None if exists else _json(last)}

    def _stale_is_free(self) -> bool:
        return False  # the server frees it at lease expiry


def _json(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _safe(e: BaseException) -> str:
    """An error's text without a URL's password (redis-py may quote the URL)."""
    import re

    return re.sub(r"://[^@/\s]*@", "://***@", str(e))[:300]
