"""Firmware compliance: every NIC's running and burnt firmware against the pinned manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode, MfctlError
from mfctl.hosts import mellanox
from mfctl.provision.models import FirmwareManifest

if TYPE_CHECKING:
    from mfctl.observer import Observer


@dataclass
class HostFirmware:
    """One host's NICs against the firmware manifest: a row per NIC (``status``: one of
    :data:`STATUSES`; ``note`` says more — an OEM PSID, a refused downgrade), or ``error`` when it
    could not be read."""

    host: str
    nics: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        """UNREACHABLE (4) when the host could not be read, DRIFT (6) when a NIC is not on its pinned
        version (burnt or running), else OK."""
        if self.error:
            return ExitCode.UNREACHABLE
        return ExitCode.DRIFT if any(r["status"] in DRIFT_STATUSES for r in self.nics) else ExitCode.OK

    def rows(self) -> list[dict]:
        """The NIC rows; a host that could not be read is one row with status ``unreachable``."""
        if self.error:
            return [{"host": self.host, "pci": None, "part_number": None, "psid": None, "base_mac": None, "running": None,
                     "burnt": None, "pinned": None, "status": "unreachable", "note": None, "error": self.error}]
        return self.nics


def firmware_check(pool, manifest: FirmwareManifest, hosts: list[str], *, observer: Observer | None = None) -> list[HostFirmware]:
    """Every NIC's running and burnt firmware (``mlxfwmanager --query``) against ``manifest``, hosts
    in parallel, in the order given."""

    def one(host: str) -> HostFirmware:
        try:
            devs = mellanox.parse_mlxfwmanager(pool.run_checked(host, mellanox.mlxfwmanager_query_argv()))
        except MfctlError as e:
            return HostFirmware(host, error=str(e))
        return HostFirmware(host, [_firmware_row(host, d, manifest) for d in devs])

    return pool.map(hosts, one, observer=observer, phase="firmware").values()


#: a NIC's status in ``firmware check``: on the pinned version (``ok``), burnt but not running yet
#: (``reset needed``), another version (``drift``), or no image pinned for its PSID
STATUSES = ("ok", "reset needed", "drift", "no pinned image")
#: the statuses ``firmware check`` exits 6 on: every one but ``ok`` (a NIC nobody pinned is a finding)
DRIFT_STATUSES = STATUSES[1:]


def _firmware_row(host: str, d, manifest: FirmwareManifest) -> dict:
    from mfctl.provision.steps.firmware import no_pin_reason

    im = manifest.for_nic(d.part_number or "", d.psid)
    want = im.version if im else None
    status = ("no pinned image" if not im else "ok" if d.running == want and d.fw_current == want else
              "reset needed" if d.fw_current == want else "drift")
    note = no_pin_reason(manifest, d) if not im else None
    if im and status == "drift" and d.fw_current and not im.allow_downgrade and \
            mellanox.version_key(d.fw_current) > mellanox.version_key(im.version):
        note = f"burnt {d.fw_current} is newer than the pinned {im.version}: a downgrade needs allow_downgrade: true"
    return {"host": host, "pci": d.pci, "part_number": d.part_number, "psid": d.psid, "base_mac": d.base_mac,
            "running": d.running, "burnt": d.fw_current, "pinned": want, "status": status, "note": note}
