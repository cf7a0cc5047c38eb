"""Who an OCS is: what it says of itself, where it is reached, and the files keyed by it.

The SID comes from every TL1 response header (GR-833), so it is read before logging in
(``RTRV-HDR`` answers even ``PLNA``, header included) and a stale inventory pointed at another
switch stops before sending its password. After login ``RTRV-NETYPE`` gives vendor and model
and ``RTRV-INV::OCS`` the serial number (``SN=…``; ``../shared/research/protocols.md`` §1.2).
Lock and journal are keyed by :attr:`DeviceIdentity.key`: the serial where the device has
one (the same switch through TCP, SSH or serial is one device), else SID at endpoint.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from mfctl.errors import ConfigError

_SN_RE = re.compile(r"\bSN=([A-Za-z0-9._-]{1,64})")


class WrongDevice(ConfigError):
    """The device reached is not the one the inventory names (SID or serial differ)."""


@dataclass(frozen=True)
class DeviceIdentity:
    sid: str
    endpoint: str
    serial: str | None = None
    vendor: str | None = None
    model: str | None = None

    @property
    def key(self) -> str:
        """File-name key: ``ocs-sn-<serial>`` when the serial is known, else ``ocs-<sid>@<endpoint>``."""
        from mfctl.lock import safe_key

        if self.serial:
            return safe_key(f"ocs-sn-{self.serial}")
        return safe_key(f"ocs-{self.sid}@{self.endpoint}")

    def to_dict(self) -> dict:
        return asdict(self) | {"key": self.key}


def parse_serial(lines: list[str]) -> str | None:
    """The serial number from ``RTRV-INV`` data lines (``...SN=ABC123...``), or None."""
    for ln in lines:
        m = _SN_RE.search(ln)
        if m:
            return m.group(1)
    return None


def parse_netype(lines: list[str]) -> tuple[str | None, str | None]:
    """``(vendor, model)`` from ``RTRV-NETYPE``'s ``"<vendor>,<model>,<type>,<sw>"``."""
    for ln in lines:
        parts = [p.strip() for p in ln.split(",")]
        if len(parts) >= 2 and parts[0]:
            return parts[0], parts[1] or None
    return None, None


def check_expected(ocs, *, endpoint: str, **said: str | None) -> None:
    """Raise :class:`WrongDevice` when the inventory names a ``sid`` / ``serial`` (the keywords
    given) and the device says another — or, for the serial, none at all."""
    for what, got in said.items():
        want = getattr(ocs, what, None)
        if not want:
            continue
        if got is None and what == "serial":
            raise WrongDevice(f"OCS {ocs.name}: the inventory says serial {want!r} but the device at {endpoint} "
                              f"reports none: cannot confirm it is the same switch")
        if got != want:
            raise WrongDevice(f"OCS {ocs.name}: the device at {endpoint} says {what.upper() if what == 'sid' else what} "
                              f"{got!r}, the inventory says {want!r}: not the switch this inventory describes (a stale "
                              f"inventory, or a reused console?) — "
                              + ("nothing was sent to it but a header request" if what == "sid" else "nothing was changed"))


def journal_path(identity: DeviceIdentity) -> Path:
    """The device's change journal, kept across runs: ``<state_dir>/ocs/<key>.journal.jsonl``."""
    from mfctl import settings

    return settings.state_dir() / "ocs" / f"{identity.key}.journal.jsonl"


def known_identity(inv, ocs: str | None = None) -> DeviceIdentity | None:
    """The identity of the OCS named ``ocs`` (None: the only one) as the inventory declares it
    (its ``sid`` and ``serial``), so that the journal can be found without reaching the device;
    None when it does not declare both."""
    o = inv.ocs if ocs is None else inv.ocs_named(ocs)
    if getattr(o, "sid", None) and getattr(o, "serial", None):
        return DeviceIdentity(sid=o.sid, endpoint="", serial=o.serial)
    return None
