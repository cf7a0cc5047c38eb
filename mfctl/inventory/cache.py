"""The validated-inventory cache: inventories by content, as pydantic-validated JSON.

Composing YAML is most of the cost of loading an inventory (libyaml builds Python nodes, then
PyYAML's constructor walks them: ~25 ms for 128 hosts, ~0.2 s for 1,024), and every mfctl
command loads one. A file that passed validation is stored as
``<state dir>/inventory-cache/<key>.json`` where ``key`` is the SHA-256 of the file's bytes and
of mfctl's inventory code (version, size and modification time of the modules that define
and check the schema): an edited file, or an mfctl whose rules changed, misses. A hit is
checked against its own checksum first (the first line: SHA-256 of the key and the JSON, so a
damaged, truncated, hand-edited or moved entry is ignored), then validated again by the same
model (``Inventory.model_validate_json``), and the loader runs the cross-checks again; anything
odd (unreadable, invalid, a full disk) only costs the time of a normal load. Readers that need
only the data (``mfctl exec``: :mod:`mfctl.inventory.data`) take the checksummed JSON as it is
(:func:`entry`): it was validated and cross-checked by the same code when it was stored. The checksum
catches accidents, not an adversary who can write the state directory (who could as well
change the journals and locks kept there). At most :data:`KEEP` entries are kept (the oldest
are removed). Inventories hold no secrets by design (DESIGN §7), so an entry holds none either.
``mfctl inventory validate`` always parses the file itself.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mfctl.inventory.models import Inventory

log = logging.getLogger(__name__)
KEEP = 32
_CODE: bytes | None = None


def _code_key() -> bytes:
    global _CODE
    if _CODE is None:
        import importlib.util

        from mfctl import __version__

        parts = [__version__]
        for name in ("mfctl.inventory.models", "mfctl.inventory.loader"):  # found, not imported (see entry())
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:  # (our own modules: always found)
                raise ImportError(f"{name} not found")
            st = os.stat(spec.origin)
            parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        _CODE = "|".join(parts).encode()
    return _CODE


def _dir() -> Path:
    from mfctl import settings

    return settings.state_path() / "inventory-cache"


def key(raw: bytes) -> str:
    """The cache key of an inventory file's bytes (hex SHA-256 of the code key and the bytes)."""
    return hashlib.sha256(_code_key() + b"\0" + raw).hexdigest()


def _checksum(k: str, body: bytes) -> bytes:
    return hashlib.sha256(k.encode() + b"\0" + body).hexdigest().encode()


def entry(raw: bytes) -> bytes | None:
    """The cached JSON of the inventory with these file bytes (validated when it was stored,
    checksum checked now), or None (not cached, unreadable, damaged). Needs neither pydantic nor
    the models: ``mfctl exec`` reads its hosts' SSH targets from it before its CLI has loaded
    (:mod:`mfctl.cli.ahead`); :func:`get` validates it into an :class:`Inventory`."""
    k = key(raw)
    p = _dir() / f"{k}.json"
    try:
        if not p.is_file() or p.stat().st_size > 8 * len(raw) + (1 << 20):  # a FIFO, a device, /dev/zero: not ours
            return None
        data = p.read_bytes()
    except OSError:
        return None
    head, _, body = data.partition(b"\n")
    if head != _checksum(k, body):
        log.warning("ignoring a damaged inventory cache entry %s.json (checksum)", k[:12])
        return None
    return body


def get(raw: bytes) -> Inventory | None:
    """The validated inventory for these file bytes, or None (not cached, unreadable, damaged)."""
    from pydantic import ValidationError

    from mfctl.inventory.models import Inventory

    body = entry(raw)
    if body is None:
        return None
    try:
        return Inventory.model_validate_json(body)
    except ValidationError as e:
        log.warning("ignoring a damaged inventory cache entry (%s)", str(e).splitlines()[0])
        return None


def put(raw: bytes, inv: Inventory) -> None:
    """Remember a validated inventory; never raises (a cache that cannot be written is skipped)."""
    d = _dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        k, body = key(raw), inv.model_dump_json().encode()
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_checksum(k, body) + b"\n" + body)
            os.replace(tmp, d / f"{k}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        entries = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError as e:
        log.debug("inventory cache not written: %s", e)
