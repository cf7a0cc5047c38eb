"""Provisioning recipes (``playbooks/provision.yaml``) and firmware manifests
(``firmware/manifest.yaml``), validated with file:line errors (exit 3).

Every value that reaches a remote command is constrained here (numbers, enumerations,
``[A-Z0-9_]`` parameter names, CIDR addresses), and commands are argv lists quoted with
``shlex.quote`` on top of that.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mfctl.inventory.loader import load_checked


class _S(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoCE(_S):
    trust: Literal["dscp", "pcp"] = "dscp"
    pfc_priority: int | None = Field(3, ge=0, le=7, description="the lossless RoCE priority (PFC on it only)")


class GPU(_S):
    persistence: bool = True
    mig: bool = False


class Optics(_S):
    rx_margin_db: float = Field(3.0, ge=0, description="required margin above the module's Rx low-warning threshold")
    ocs_agreement_db: float = Field(2.0, gt=0, description="module Rx total vs. OCS output-port reading")


class ProvisionSpec(_S):
    name: str
    inventory: str
    firmware_manifest: str | None = None
    mtu: int = Field(9000, ge=1280, le=9978)
    address_pattern: str | None = Field(None, description="per lane CIDR, e.g. 198.18.{nic}.{slot}/24 ({host}: "
                                        "1-based host index, {nic}: NIC index, {lane}: lane index, {slot}: "
                                        "8 x (host - 1) + lane + 1); every lane must get its own address")
    roce: RoCE = RoCE()
    gpu: GPU = GPU()
    mlxconfig: dict[str, int] = Field(default_factory=dict, description="firmware settings (numeric values): a known "
                                      "parameter within its range (mfctl.hosts.mellanox.MLXCONFIG_PARAMS), any other "
                                      "name only as a raw non-negative number")
    optics: Optics = Optics()

    source: str | None = Field(None, exclude=True)

    @field_validator("mlxconfig")
    @classmethod
    def _names(cls, v: dict[str, int]) -> dict[str, int]:
        import re

        from mfctl.hosts.mellanox import check_mlxconfig_value

        for k, val in v.items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]{1,63}", k):
                raise ValueError(f"{k!r} is not an mlxconfig parameter name")
            why = check_mlxconfig_value(k, val)
            if why:
                raise ValueError(why)
        return v

    @field_validator("address_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "/" not in v:
            raise ValueError(f"{v!r} needs an explicit /prefix")
        try:
            ipaddress.ip_interface(v.format(host=1, nic=0, lane=0, slot=1))
        except (ValueError, KeyError, IndexError) as e:
            raise ValueError(f"{v!r} does not give an address/prefix: {e}") from None
        return v

    def path(self, p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() or not self.source else Path(self.source).parent / q

    def address_for(self, host_index: int, nic_index: int, lane_index: int) -> str | None:
        if not self.address_pattern:
            return None
        return str(ipaddress.ip_interface(self.address_pattern.format(
            host=host_index, nic=nic_index, lane=lane_index, slot=8 * (host_index - 1) + lane_index + 1)))

    def check_addresses(self, inv) -> None:
        """Every lane of every host must get a distinct address. Raises ConfigError."""
        from mfctl.errors import ConfigError

        seen: dict[str, str] = {}
        for hi, h in enumerate(inv.hosts):
            for ni, nic in enumerate(h.nics):
                for lane in nic.lanes:
                    try:
                        a = self.address_for(hi + 1, ni, lane.index)
                    except ValueError as e:
                        raise ConfigError(f"address_pattern gives no valid address for {h.name}/{nic.name}.{lane.index}: {e}",
                                          path=self.source) from None
                    ip = a.split("/")[0] if a else None
                    if ip and ip in seen:
                        raise ConfigError(f"address_pattern gives {ip} to both {seen[ip]} and {h.name}/{nic.name}.{lane.index}"
                                          " (use {host}, {nic}, {lane} or {slot})", path=self.source)
                    if ip:
                        seen[ip] = f"{h.name}/{nic.name}.{lane.index}"


class FirmwareImage(_S):
    """One pinned image. It is matched to a NIC by ``psid`` exactly (an image is built for one PSID:
    flint and mlxfwmanager refuse another's); ``part_number`` says which board it is for and is
    only used to explain a NIC left without an image."""

    part_number: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="the board's part number (prefix), for messages")
    psid: str = Field(pattern=r"^[A-Z0-9_]{1,16}$", description="the PSID the image is built for, matched exactly")
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    image: str = Field(pattern=r"^/[A-Za-z0-9_./-]+$", description="absolute path of the image on the hosts")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    allow_downgrade: bool = Field(False, description="burn this image even over a newer one (mlxfwmanager --force); "
                                  "without it a NIC with newer firmware is refused")


class FirmwareManifest(_S):
    images: list[FirmwareImage] = Field(min_length=1)

    @field_validator("images")
    @classmethod
    def _one_per_psid(cls, v: list[FirmwareImage]) -> list[FirmwareImage]:
        seen: set[str] = set()
        for im in v:
            if im.psid in seen:
                raise ValueError(f"two images pinned for PSID {im.psid}: pin one version per PSID")
            seen.add(im.psid)
        return v

    def for_nic(self, part_number: str, psid: str | None) -> FirmwareImage | None:
        """The image pinned for ``psid`` (exactly; never through the part number), or None."""
        return next((im for im in self.images if psid and im.psid == psid), None)

    def near_miss(self, part_number: str, psid: str | None) -> FirmwareImage | None:
        """An image for the same board (part-number prefix) but another PSID: what an OEM card
        (``DEL…``/``HPE…``/``LNV…`` PSID) would be offered and refuses."""
        return next((im for im in self.images if part_number and part_number.startswith(im.part_number)
                     and im.psid != psid), None)


def load_spec(path: str | Path) -> ProvisionSpec:
    spec = load_checked(path, ProvisionSpec)
    spec.source = str(Path(path).resolve())
    return spec


def load_manifest(path: str | Path) -> FirmwareManifest:
    return load_checked(path, FirmwareManifest)
