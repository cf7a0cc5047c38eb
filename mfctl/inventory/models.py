"""Pydantic models of an mFabric testbed.

Units: link speeds in Gbit/s, optical power in dBm, times in ms unless a field says so.
Every model forbids unknown keys so a typo in an inventory is an error, not a silent default.
Secrets are never fields: the OCS password comes from an environment variable or a file
named here (``password_env`` / ``password_file``), SSH from a key file or the agent.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_serializer, field_validator, model_validator

from mfctl.settings import SETTINGS


class _Strict(BaseModel):
    """Base of every inventory model: no unknown keys, and every float a finite number (``.inf``
    and ``.nan`` pass ``gt=0``/``ge=0`` but are no switching time, loss or rate: refused at their
    line, exit 3 — an infinite ``switching_time_ms`` became ``null`` in the mock's inventory)."""

    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one DNS label (RFC 1123)
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def check_address(v: str) -> str:
    """An IPv4/IPv6 address or a DNS host name (nothing a shell could misread)."""
    try:
        ipaddress.ip_address(v)
        return v
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", v):  # a host name's last label is never all digits (RFC 3696 §2): a bad IPv4
        raise ValueError(f"{v!r} is not an IPv4 address (four numbers 0-255) nor a host name")
    if not _HOSTNAME.match(v):
        raise ValueError(f"{v!r} is neither an IP address nor a host name")
    return v


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class SSHEndpoint(_Strict):
    """How to reach a host's sshd. Authentication: ``key_file`` or the SSH agent."""

    address: str
    port: Port = 22
    user: str = Field("root", pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")
    key_file: str | None = None
    agent: bool = True

    _addr = field_validator("address")(classmethod(lambda cls, v: check_address(v)))


class Lane(_Strict):
    """One lane of a NIC port. An optical lane has the OCS ports its fibres land on.

    ``ocs_tx``: the OCS *input* port fed by this lane's transmitter.
    ``ocs_rx``: the OCS *output* port wired to this lane's receiver.
    """

    index: Annotated[int, Strict()] = Field(ge=0, le=7)
    netdev: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    ocs_tx: Annotated[int, Strict()] | None = Field(None, ge=1)
    ocs_rx: Annotated[int, Strict()] | None = Field(None, ge=1)


class NIC(_Strict):
    """A NIC port as the host sees it. ``role`` says where its lanes go."""

    name: str = Field(pattern=NAME_PATTERN)
    model: str = "ConnectX-6"
    pci: str | None = Field(None, pattern=r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$",
                            description="PCI address, domain:bus:device.function")
    speed_gbps: float = Field(100.0, gt=0, description="Port rate, Gbit/s")
    breakout: str = Field("1x100G", description="NxSPEEDG: N sub-ports of SPEED Gbit/s, e.g. 1x100G, 2x50G "
                          "(checked against the card, lanes and optics: mfctl.provision.breakout.check_nic)")
    optics: str = Field("100G-CWDM4", pattern=r"^[A-Za-z0-9-]{1,32}$",
                        description="transceiver class (mfctl.provision.breakout.MODULES): 100G-CWDM4, 100G-LR4 "
                        "(duplex LC), 100G-SR4, 100G-PSM4 (parallel, MPO-12)")
    cable: Literal["duplex-lc", "mpo-12", "mpo-fanout"] = Field(
        "duplex-lc", description="the fibre on the module: duplex LC, an MPO-12 trunk, or an MPO-12 fan-out "
        "(breakout) cable whose legs go to different places")
    numa_node: int = Field(0, ge=0)
    rdma_device: str | None = Field(None, pattern=r"^[A-Za-z0-9_]{1,32}$", description="RDMA device (mlx5_0) for NCCL_IB_HCA")
    rx_sensitivity_dbm: float = Field(-10.0, le=0, description="Receiver sensitivity per lane, dBm (100G-CWDM4 "
                                      "datasheet class); OCS ports below this plus ocs.power_margin_db are flagged")
    role: Literal["ocs", "eps"]
    lanes: list[Lane] = Field(min_length=1)

    @property
    def lane_rate_gbps(self) -> float:
        return self.speed_gbps / len(self.lanes)

    def subport_channels(self, lane: Lane) -> list[int]:
        """The module channels (1-based, as ``ethtool -m`` numbers them) that ``lane`` (a sub-port)
        uses: all of them when the port is not split."""
        from mfctl.provision.breakout import MODULES, subport_channels

        mod = MODULES.get(self.optics)
        if mod is None or len(self.lanes) == 1:
            return list(range(1, (mod.channels if mod else 4) + 1))
        return subport_channels(mod, len(self.lanes), lane.index)


class GPUs(_Strict):
    count: Annotated[int, Strict()] = Field(8, ge=1, le=16)
    model: str = "NVIDIA A100-SXM4-80GB"
    nvlink_gbps: float = Field(1840.0, gt=0, description="NVLink bandwidth per direction, Gbit/s (A100: ~230 GB/s)")


class Host(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    ssh: SSHEndpoint
    mgmt_netdev: str = Field("eno1", pattern=r"^[A-Za-z0-9_.-]{1,15}$",
                             description="management network interface: NCCL's bootstrap socket (never an optical lane)")
    gpus: GPUs = GPUs()
    nics: list[NIC] = Field(min_length=1)

    def ocs_lanes(self) -> list[tuple[NIC, Lane]]:
        return [(n, lane) for n in self.nics if n.role == "ocs" for lane in n.lanes]

    def eps_nics(self) -> list[NIC]:
        return [n for n in self.nics if n.role == "eps"]


class LoginHost(_Strict):
    """A host that is not a GPU server: a cluster's login (submit) node, named by a playbook's
    ``runtime.slurm.submit_host``. Only reached over SSH to run the scheduler's client commands
    (``sbatch``/``scontrol``/``scancel``) — never health-swept, link-polled or given a task."""

    name: str = Field(pattern=NAME_PATTERN)
    ssh: SSHEndpoint
    description: str = ""


class SerialTransport(_Strict):
    kind: Literal["serial"]
    device: str = Field(description="Device path or pyserial URL (socket://, rfc2217://)")
    baudrate: int = Field(9600, gt=0)
    bytesize: Literal[5, 6, 7, 8] = 8
    parity: Literal["N", "E", "O", "M", "S"] = "N"
    stopbits: Literal[1, 2] = 1


class TCPTransport(_Strict):
    kind: Literal["tcp"]
    address: str
    port: Port = Field(3082, description="Polatis raw TL1 default 3082")

    _addr = field_validator("address")(classmethod(lambda cls, v: check_address(v)))


class SSHTransport(_Strict):
    kind: Literal["ssh"]
    address: str
    port: Port = Field(6252, description="Polatis TL1-over-SSH default 6252")

    _addr = field_validator("address")(classmethod(lambda cls, v: check_address(v)))


Transport = Annotated[SerialTransport | TCPTransport | SSHTransport, Field(discriminator="kind")]


class OCSSize(_Strict):
    """N×M: inputs are ports 1..N, outputs N+1..N+M (Polatis numbering)."""

    inputs: Annotated[int, Strict()] = Field(ge=1, le=1024)
    outputs: Annotated[int, Strict()] = Field(ge=1, le=1024)

    @property
    def total(self) -> int:
        return self.inputs + self.outputs


class OCS(_Strict):
    """One optical circuit switch. ``name``: how regions (``regions[].ocs``), ``mfctl ocs --ocs``
    and the run's records name it (a TL1-safe identifier; "ocs" when an inventory's only OCS
    does not say)."""

    name: str = Field("ocs", pattern=NAME_PATTERN)
    model: str = "Polatis Series 7000"
    size: OCSSize
    transports: list[Transport] = Field(min_length=1, description="Tried in order")
    user: str = Field("admin", description="TL1 user id (ACT-USER); a TL1 identifier")
    sid: str | None = Field(None, description="The switch's SID (TL1 response header): checked before login")
    serial: str | None = Field(None, description="The switch's serial number (RTRV-INV SN=): checked after login")
    password_env: str | None = Field(SETTINGS["ocs_password"].env, pattern=r"^[A-Z_][A-Z0-9_]*$")  # MFCTL_OCS_PASSWORD
    password_file: str | None = None
    known_hosts: str | None = Field(None, description="known_hosts for the SSH transport")
    insertion_loss_db: float = Field(1.0, ge=0, description="Per pass, dB (datasheet class)")
    switching_time_ms: float = Field(25.0, gt=0, description="Mirror/beam settle time (DESIGN §2)")
    power_margin_db: float = Field(3.0, ge=0, description="Margin above the optics' sensitivity before a port is flagged")
    max_pairs_per_command: int = Field(64, ge=1, description="Cross-connects per ENT/DLT-PATCH the device accepts")

    @field_validator("user", "sid", "serial")
    @classmethod
    def _tl1_identifier(cls, v, info):
        """Anything sent to the OCS obeys TL1's grammar: no ``; : , " &``, no control characters."""
        from mfctl.ocs.tl1 import TL1FieldError, check_ident

        if v is None:
            return v
        try:
            return check_ident(f"ocs.{info.field_name}", v)
        except TL1FieldError as e:
            raise ValueError(e.problem) from None

    def password(self, base: Path | None = None) -> str:
        """The TL1 password from ``password_file`` or ``password_env`` (never the inventory); ""
        only when the inventory says the switch has none (``password_env: null``, no file). A
        ``password_env`` (the default ``MFCTL_OCS_PASSWORD`` too) that is unset or empty is a
        ConfigError naming the variable, raised before anything is connected: an empty ACT-USER
        is a failed login, and failed logins can lock the switch's account."""
        from mfctl.errors import ConfigError

        if self.password_file:

            p = Path(os.path.expanduser(self.password_file))
            if base is not None and not p.is_absolute():
                p = base / p
            try:
                if p.exists() and not p.is_file():  # a FIFO would block, a directory is no password
                    raise ConfigError(f"ocs.password_file {p}: not a regular file")
                pw = p.read_bytes()[:4096].decode("ascii").strip()
                if not pw:
                    raise ConfigError(f"ocs.password_file {p}: empty")
                return pw
            except UnicodeDecodeError:
                raise ConfigError(f"ocs.password_file {p}: not ASCII text (a TL1 password is printable ASCII)") from None
            except OSError as e:
                raise ConfigError(f"ocs.password_file {p}: cannot read it: {e.strerror or e}") from None
        if self.password_env:
            pw = os.environ.get(self.password_env, "")
            if not pw:
                raise ConfigError(f"OCS {self.name}: ${self.password_env} (ocs.password_env) is "
                                  f"{'empty' if self.password_env in os.environ else 'not set'}: set it to the switch's "
                                  "TL1 password, or name a file in ocs.password_file (a switch without a password: "
                                  "password_env: null); nothing was sent to the switch")
            return pw
        return ""


class EPS(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    model: str = "NVIDIA Spectrum SN3700"
    ports: int = Field(32, ge=1)
    port_speed_gbps: float = Field(200.0, gt=0)
    oversubscription: float = Field(1.0, ge=1.0, description="Host-facing : uplink ratio")


class Region(_Strict):
    """A group of hosts whose optical lanes all land on one OCS (``ocs``: its name; required when
    the inventory has several, else the only one). One OCS per region: a circuit joins two ports
    of one switch, so a region split over two switches could not join every pair of its lanes."""

    name: str = Field(pattern=NAME_PATTERN)
    hosts: list[str] = Field(min_length=2)
    ocs: str | None = Field(None, pattern=NAME_PATTERN, description="the OCS its hosts' optical lanes reach "
                            "(required when the inventory has several)")


class SSHDefaults(_Strict):
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_policy: Literal["strict", "accept-new"] = "strict"


class LockBackend(_Strict):
    """Where the testbed lock lives (docs/locks.md): ``file`` (the default: this machine's lock
    directory) or ``redis`` (one server shared by every machine that drives the testbed). The
    Redis password comes from ``password_env`` or ``password_file``, never from the URL."""

    backend: Literal["file", "redis", "etcd"] = "file"
    url: str | None = Field(None, description="redis://HOST:PORT/DB, rediss:// (TLS) or unix:///PATH (redis); "
                            "http(s)://HOST:PORT (etcd's v3 JSON gateway)")
    password_env: str | None = Field(SETTINGS["lock_password"].env, pattern=r"^[A-Z_][A-Z0-9_]*$")  # MFCTL_LOCK_PASSWORD
    password_file: str | None = None
    ttl_s: float = Field(60.0, ge=1.0, le=86400.0, description="Lease of an in-process holder, s (renewed every ttl/3)")
    key_prefix: str = Field("mfctl", pattern=r"^[A-Za-z0-9:_.-]{1,64}$", description="Prefix of the Redis keys")
    timeout_s: float = Field(2.0, gt=0, le=60, description="Connect and command timeout of the lock service, s")

    @field_validator("url")
    @classmethod
    def _url(cls, v):
        from urllib.parse import urlsplit

        if v is None:
            return v
        u = urlsplit(v)
        if u.scheme not in ("redis", "rediss", "unix", "http", "https"):
            raise ValueError("lock.url must be redis://HOST:PORT/DB, rediss://… or unix:///PATH (redis), "
                             "http(s)://HOST:PORT (etcd)")
        if "@" in u.netloc:
            raise ValueError("lock.url must not hold a user or password: use lock.password_env or lock.password_file")
        if u.scheme != "unix" and not u.hostname:
            raise ValueError("lock.url has no host")
        if u.hostname:
            check_address(u.hostname)
        return v

    @model_validator(mode="after")
    def _backend_needs(self):
        if self.backend == "redis" and not self.url:
            raise ValueError("lock.backend redis needs lock.url (redis://HOST:PORT/DB)")
        if self.backend == "etcd" and not self.url:
            raise ValueError("lock.backend etcd needs lock.url (http://HOST:2379)")
        if self.backend == "file" and self.url:
            raise ValueError("lock.url is for backend redis or etcd (lock.backend is file)")
        scheme = (self.url or "").split(":", 1)[0]
        if self.url and (self.backend == "etcd") != (scheme in ("http", "https")):
            raise ValueError(f"lock.url {scheme}:// is not for lock.backend {self.backend}")
        return self


class Inventory(_Strict):
    """A whole testbed. Load with :func:`mfctl.inventory.load_inventory`.

    ``ocs`` in the file is one mapping (one OCS) or a list of them, each with a unique ``name``;
    the model holds the list as :attr:`ocses` (dumped as the file wrote it: one mapping for one
    OCS). :attr:`ocs` is the only OCS (a ConfigError naming them when there are several: the
    caller must choose, :meth:`ocs_named`, :meth:`ocs_of_region`)."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)  # the file says "ocs", never "ocses"

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    ssh: SSHDefaults = SSHDefaults()
    hosts: list[Host] = Field(min_length=1)
    login_hosts: list[LoginHost] = Field(default_factory=list, description="login/submit nodes that are not "
                                         "GPU servers (runtime.slurm.submit_host may name one)")
    ocses: list[OCS] = Field(alias="ocs", min_length=1, description="one OCS (a mapping) or several (a list of "
                             "mappings, each a unique name)")
    eps: EPS
    regions: list[Region] = Field(min_length=1)
    lock: LockBackend = Field(default_factory=LockBackend, description="the testbed lock's backend (docs/locks.md)")

    # set by the loader, not part of the schema
    source: str | None = Field(None, exclude=True)

    @field_validator("ocses", mode="before")
    @classmethod
    def _one_or_several(cls, v):
        return [v] if isinstance(v, dict) else v

    @field_serializer("ocses")
    def _dump_ocses(self, v: list[OCS], info):
        rows = [o.model_dump(mode=info.mode, by_alias=True) for o in v]
        return rows[0] if len(rows) == 1 else rows

    @property
    def ocs(self) -> OCS:
        """The inventory's only OCS. Raises ConfigError (exit 3) when it has several: a command
        that works on one must be told which (``--ocs NAME``: :meth:`ocs_named`)."""
        if len(self.ocses) == 1:
            return self.ocses[0]
        from mfctl.errors import ConfigError

        raise ConfigError(f"inventory {self.name} has {len(self.ocses)} OCSes ({', '.join(self.ocs_names)}): "
                          "name one (--ocs NAME)", path=self.source)

    @property
    def ocs_names(self) -> list[str]:
        return [o.name for o in self.ocses]

    def ocs_named(self, name: str | None) -> OCS:
        """The OCS called ``name``; None: the only one. Raises UsageError (exit 2) for an unknown
        name, or no name when there are several (the message lists them)."""
        from mfctl.errors import UsageError

        if name is None:
            if len(self.ocses) == 1:
                return self.ocses[0]
            raise UsageError(f"inventory {self.name} has {len(self.ocses)} OCSes: give --ocs NAME, one of "
                             f"{', '.join(self.ocs_names)}")
        for o in self.ocses:
            if o.name == name:
                return o
        raise UsageError(f"no OCS {name!r} in inventory {self.name} (it has {', '.join(self.ocs_names)})")

    def region_ocs(self, region: Region) -> OCS | None:
        """The OCS of ``region``: the one it names, else the only one (None: it names none of them)."""
        if region.ocs is None:
            return self.ocses[0] if len(self.ocses) == 1 else None
        return next((o for o in self.ocses if o.name == region.ocs), None)

    def ocs_of_host(self, host: str) -> OCS | None:
        """The OCS that ``host``'s optical lanes reach: its region's (the only OCS when there is one;
        None: several and the host is in no region that names one)."""
        if len(self.ocses) == 1:
            return self.ocses[0]
        r = next((r for r in self.regions if host in r.hosts), None)
        return self.region_ocs(r) if r is not None else None

    def regions_on(self, ocs: str) -> list[Region]:
        """The regions whose lanes reach the OCS named ``ocs``."""
        return [r for r in self.regions if (o := self.region_ocs(r)) is not None and o.name == ocs]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def login_host(self, name: str) -> LoginHost:
        for h in self.login_hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def base_dir(self) -> Path | None:
        return Path(self.source).parent if self.source else None
