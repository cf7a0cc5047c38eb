"""The etcd backend: a lease in an etcd v3 cluster, through its JSON gateway (``/v3/...``, HTTP).

Keys (``P`` = ``lock.key_prefix``, ``N`` = the testbed's name): ``P/testbed/N`` (the token),
``P/testbed/N/holder`` (the holder record), both attached to one etcd lease of ``ttl`` seconds
(etcd leases are whole seconds: rounded up); ``P/testbed/N/last`` (the last holder's record, on
a lease of a day, deleted by a release). Taking the lock is one transaction comparing the lock
key's create revision with 0 (it does not exist) — exactly one of several acquirers succeeds;
renewing is ``LeaseKeepAlive``; releasing a transaction comparing the value with the token.
See https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/ and the KV/Lease API
(https://etcd.io/docs/v3.4/learning/api/). No authentication (an etcd on the lab's network, or
behind TLS client certificates the gateway URL's proxy checks).
"""

from __future__ import annotations

import base64
import json
import math
import time
import urllib.error
import urllib.request
from pathlib import Path

from mfctl.errors import LockError, UnreachableError
from mfctl.lock.lease import Lease, iso, redact_url

LAST_KEPT_S = 86_400


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _unb64(s: str | None) -> str | None:
    return base64.b64decode(s).decode() if s else None


class EtcdLease(Lease):
    """A lease kept in etcd (see the module's docstring)."""

    backend = "etcd"

    def __init__(self, name: str, purpose: str, *, config, base_dir: Path | None = None, **kw):
        super().__init__(name, purpose, **kw)
        self.config = config
        self.url = (config.url or "").rstrip("/")
        p = f"/{config.key_prefix}/{self.what}/{name}"
        self.keys = [p, f"{p}/holder", f"{p}/last"]
        self.timeout_s = min(float(config.timeout_s), self.ttl / 4)

    def where(self) -> str:
        return redact_url(self.url)

    def _post(self, path: str, body: dict, what: str) -> dict:
        req = urllib.request.Request(f"{self.url}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:  # noqa: S310 (the inventory's URL, http/https)
                return json.loads(r.read(1 << 20) or b"{}")
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read(4096)).get("error") or e.reason
            except ValueError:
                msg = e.reason
            raise LockError(f"{self.what} {self.name!r}: the lock service at {self.where()} answered {e.code} {msg}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise UnreachableError(f"{self.what} {self.name!r}: the lock service at {self.where()} cannot be reached "
                                   f"to {what} ({type(e).__name__}: {getattr(e, 'reason', e)})") from None

    def _grant(self, ttl: float) -> str:
        return str(self._post("lease/grant", {"TTL": max(1, math.ceil(ttl))}, "grant a lease")["ID"])

    def _revoke(self, lease: str) -> None:
        try:
            self._post("lease/revoke", {"ID": lease}, "revoke a lease")
        except LockError:
            pass  # (already gone)

    def _get(self, key: str) -> dict | None:
        kvs = self._post("kv/range", {"key": _b64(key)}, "read the lock").get("kvs") or []
        return kvs[0] if kvs else None

    def _txn_put(self, compare: list, token: str, record: dict, lease: str, what: str) -> bool:
        ops = [{"requestPut": {"key": _b64(self.keys[0]), "value": _b64(token), "lease": lease}},
               {"requestPut": {"key": _b64(self.keys[1]), "value": _b64(json.dumps(record)), "lease": lease}}]
        return bool(self._post("kv/txn", {"compare": compare, "success": ops}, what).get("succeeded"))

    def _is_token(self, token: str) -> list:
        return [{"key": _b64(self.keys[0]), "target": "VALUE", "result": "EQUAL", "value": _b64(token)}]

    def _try_acquire(self, record: dict, token: str) -> bool:
        if self._get(self.keys[0]) is not None:  # held: a read, not a lease granted and revoked per poll
            return False
        lease = self._grant(self.ttl)
        free = [{"key": _b64(self.keys[0]), "target": "CREATE", "result": "EQUAL", "createRevision": "0"}]
        if not self._txn_put(free, token, record, lease, "take the lock"):
            self._revoke(lease)
            return False
        last = self._grant(LAST_KEPT_S)
        self._post("kv/put", {"key": _b64(self.keys[2]), "value": _b64(json.dumps(record)), "lease": last}, "note the holder")
        return True

    def _extend(self, token: str, ttl: float, keep_longer: bool = False) -> dict | None:
        kv = self._get(self.keys[0])
        if kv is None or _unb64(kv.get("value")) != token:
            return None
        lease = str(kv.get("lease") or "")
        hkv = self._get(self.keys[1])
        try:
            rec = json.loads(_unb64(hkv.get("value")) or "{}") if hkv else {}
        except ValueError:
            rec = {}
        ttl_info = self._post("lease/timetolive", {"ID": lease}, "read the lease")
        left, granted = int(ttl_info.get("TTL") or -1), int(ttl_info.get("grantedTTL") or 0)
        now = time.time()
        if keep_longer and left >= ttl:
            return rec
        if granted == max(1, math.ceil(ttl)):
            got = self._post("lease/keepalive", {"ID": lease}, "renew the lease").get("result") or {}
            if int(got.get("TTL") or 0) <= 0:
                return None  # the lease had expired
        else:  # another length: a new lease, the keys moved onto it if the token still holds them
            new = self._grant(ttl)
            rec.update(ttl_s=ttl, expires_ts=now + ttl, expires=iso(now + ttl))
            if not self._txn_put(self._is_token(token), token, rec, new, "renew the lease"):
                self._revoke(new)
                return None
            self._revoke(lease)
        rec.update(ttl_s=ttl, expires_ts=now + ttl, expires=iso(now + ttl))
        return rec

    def _release(self, token: str) -> bool:
        kv = self._get(self.keys[0])
        ops = [{"requestDeleteRange": {"key": _b64(k)}} for k in self.keys]
        done = bool(self._post("kv/txn", {"compare": self._is_token(token), "success": ops}, "release the lock")
                    .get("succeeded"))
        if done and kv and kv.get("lease"):
            self._revoke(str(kv["lease"]))
        return done

    def _force_release(self) -> None:
        kv = self._get(self.keys[0])
        for k in self.keys:
            self._post("kv/deleterange", {"key": _b64(k)}, "release the lock")
        if kv and kv.get("lease"):
            self._revoke(str(kv["lease"]))

    def _inspect(self) -> dict:
        kv = self._get(self.keys[0])
        hkv = self._get(self.keys[1])
        lkv = None if kv else self._get(self.keys[2])

        def rec_of(x):
            try:
                d = json.loads(_unb64(x.get("value")) or "") if x else None
            except ValueError:
                return None
            return d if isinstance(d, dict) else None

        rec = rec_of(hkv)
        left = None
        if kv is not None:
            if rec is None:
                rec = {"purpose": "?", "note": "the lock holds no holder record (not taken by mfctl?)"}
            ttl = int(self._post("lease/timetolive", {"ID": str(kv.get("lease") or 0)}, "read the lease").get("TTL") or -1)
            left = float(ttl) if ttl >= 0 else None
            if left is not None:
                rec["expires_ts"] = time.time() + left
                rec["expires"] = iso(rec["expires_ts"])
        return {"record": rec, "present": kv is not None, "expires_in_s": left, "last": rec_of(lkv)}

    def _stale_is_free(self) -> bool:
        return False  # etcd frees it at lease expiry
