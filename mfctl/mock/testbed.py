"""The whole mock testbed on 127.0.0.1: one SSH server per inventory host, one OCS emulator
per inventory OCS (each on a pseudo-terminal, raw TCP and SSH of its own, a serial and SID of
its own), and a ready-to-use inventory for them.

The hosts' SSH servers are real OpenSSH sshds (``sshd="openssh"``: one per host, its sessions
relayed to this process, :mod:`mfctl.mock.hostsshd`) or paramiko servers in this process
(``"paramiko"``, :mod:`mfctl.mock.sshd`); ``"auto"`` takes OpenSSH where it is installed. The
OCS's SSH endpoint is paramiko's either way (a device's CLI, not a host).

Written to the state directory (mode 0700):
- ``inventory.yaml`` — the source testbed pointed at the mock endpoints;
- ``known_hosts`` — the per-instance host keys (clients check them strictly);
- ``client_key`` — the SSH key the mock hosts accept; ``ocs_password`` — the TL1 password;
- ``status.json`` — pid, endpoints, time scale, which sshd; ``mock.log``;
- ``hosts/<name>/`` — an OpenSSH host's keys, ``sshd_config`` and ``sshd.log``;
  ``hosts/<name>.sock`` — its relay socket (mode 0600).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import secrets
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import paramiko
import yaml

from mfctl.inventory import load_inventory
from mfctl.mock import hostsshd
from mfctl.mock.hosts import STOP_TIMEOUT_S as HOST_STOP_TIMEOUT_S
from mfctl.mock.hosts import MockHost, MockLane
from mfctl.mock.nics import HostConfig, NICState
from mfctl.mock.nics import firmware as nic_firmware
from mfctl.mock.nics.state import CARD_MODELS
from mfctl.mock.ocs_emulator import OCSEmulator, PtyServer, TCPServer, ssh_shell_handler
from mfctl.mock.slurm import MockSlurm
from mfctl.mock.sshd import MockSSHServer
from mfctl.procs import start_ticks

log = logging.getLogger(__name__)

LANE_TX_DBM = 1.0  # a 100G-CWDM4/LR4-class lane's launch power, dBm (module datasheet class)
UNIX_PATH_MAX = 107  # bytes of a unix socket's path (sun_path is 108 with its NUL, Linux unix(7))


class MockOCS:
    """One inventory OCS in the mock: its emulator and the lanes whose RX ports are on it (for
    their link state), and its three endpoints once :meth:`serve` started them."""

    def __init__(self, name: str, emulator: OCSEmulator):
        self.name, self.emulator = name, emulator
        self.lane_by_rx: dict[int, MockLane] = {}
        self.pty: PtyServer | None = None
        self.tcp: TCPServer | None = None
        self.ssh: MockSSHServer | None = None

    def serve(self, user: str, password: str) -> str:
        """Start the pty, TCP and SSH endpoints; the known_hosts line of the SSH one."""
        self.pty = PtyServer(self.emulator)
        self.tcp = TCPServer(self.emulator)
        hk = paramiko.ECDSAKey.generate(bits=256)
        self.ssh = MockSSHServer(self.name, hk, users={user}, password=password,
                                 on_shell=ssh_shell_handler(self.emulator))
        return f"[127.0.0.1]:{self.ssh.port} {hk.get_name()} {hk.get_base64()}"

    def endpoints(self) -> dict:
        """``{serial, tcp, ssh}``: the pty path and the two ports (status.json's ``ocs``)."""
        assert self.pty is not None and self.tcp is not None and self.ssh is not None
        return {"serial": self.pty.slave_path, "tcp": self.tcp.port, "ssh": self.ssh.port}

    def close(self) -> None:
        for x in (self.pty, self.tcp, self.ssh):
            if x is not None:
                x.close()


class _HostView:
    """What a mock host sees of the testbed (``MockHost.testbed``): the testbed, with ``ocs`` and
    ``lane_by_rx`` those of the OCS its region's lanes reach."""

    def __init__(self, testbed: "MockTestbed", ocs: MockOCS):
        self._testbed, self.ocs, self.lane_by_rx = testbed, ocs.emulator, ocs.lane_by_rx

    def __getattr__(self, name: str):
        return getattr(self._testbed, name)


class MockTestbed:
    def __init__(self, inventory_path: str | Path, state_dir: str | Path, *, time_scale: float = 1.0, factory: bool = False,
                 inject: list[str] = (), sshd: str = "auto"):
        self.sshd_wanted = sshd  # auto | openssh | paramiko (hostsshd.choose)
        self.sshd = ""  # what serves the hosts once started: openssh or paramiko
        self.factory = factory  # hosts start unprovisioned (MTU 1500, old firmware, no RoCE QoS, ...)
        self.inject = list(inject)  # fault specs (mfctl.mock.inject), applied before the mock says it is up
        self.source = load_inventory(inventory_path)
        self.state = Path(state_dir).resolve()
        self.state.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state, 0o700)
        self.time_scale = float(time_scale)
        self.servers: dict[str, MockSSHServer | hostsshd.OpenSSHHost] = {}
        self.hosts: dict[str, MockHost] = {}
        self.lane_by_rx: dict[int, MockLane] = {}  # the first OCS's (each MockOCS has its own)
        self.ocses: dict[str, MockOCS] = {}  # by inventory name, in inventory order
        self.ocs: OCSEmulator | None = None  # the first OCS's emulator (faults: mfctl.mock.inject)
        self.slurm: MockSlurm | None = None

    def _socket_dir(self) -> Path:
        """Where the relay sockets go: ``<state>/hosts``, or a 0700 directory of its own under the
        system's temporary directory when that path is too long for a unix socket."""
        d = self.state / "hosts"
        longest = max(len(h.name) for h in self.source.hosts) + len(".sock") + 1
        if len(os.fsencode(d)) + longest <= UNIX_PATH_MAX:
            d.mkdir(mode=0o700, exist_ok=True)
            return d
        self._tmp_sockets = Path(tempfile.mkdtemp(prefix="mfctl-mock-"))  # created 0700
        return self._tmp_sockets

    def _openssh_hosts(self, client_key: paramiko.PKey) -> list[hostsshd.OpenSSHHost]:
        """One real sshd per host (keys made in parallel), not started yet."""
        names = [h.name for h in self.source.hosts]
        keys = hostsshd.generate_host_keys([self.state / "hosts" / n for n in names])
        sockets = self._socket_dir()
        env = {k: os.environ[k] for k in ("MFCTL_STATE_DIR",) if os.environ.get(k)}
        env["SHLVL"] = "1"  # the login shell is not this machine's: bash reads ~/.bashrc for sshd only at level 1
        return [hostsshd.OpenSSHHost(n, self.state / "hosts" / n, sockets / f"{n}.sock", self.hosts[n].handle,
                                     authorized_key=f"{client_key.get_name()} {client_key.get_base64()}",
                                     host_keys=k, env=env) for n, k in zip(names, keys)]

    def _nic_state(self, ni: int, nic) -> NICState:
        """The mock card behind inventory NIC ``nic`` (position ``ni``): its model's part number, PSID and
        firmware (:data:`~mfctl.mock.nics.state.CARD_MODELS`), the module the inventory says, systemd's slot
        name from the inventory's netdev (``ens1`` of ``ens1f0np0``). Factory cards are not split and run
        old firmware; a provisioned mock matches the inventory (split, firmware, QoS of playbooks/provision.yaml)."""
        pci = nic.pci or f"0000:{0x0c + 6 * ni:02x}:00.0"
        m = re.match(r"^(.+?)f\d+np\d+", nic.lanes[0].netdev)
        base = m.group(1) if m else f"ens{ni + 1}"
        card = CARD_MODELS.get(nic.model, CARD_MODELS["ConnectX-6 Dx"])
        st = NICState(nic.name, pci, card["part_number"], card["psid"], nic.speed_gbps, base,
                      split=1 if self.factory else len(nic.lanes), fw=card["factory_fw"],
                      model=nic.model if nic.model in CARD_MODELS else "ConnectX-6 Dx", optics=nic.optics,
                      wired=len(nic.lanes))
        if not self.factory:  # provisioned like playbooks/provision.yaml (addresses excepted)
            st.fw, st.trust, st.pfc = card["fw"], "dscp", [0, 0, 0, 1, 0, 0, 0, 0]
        nic_firmware.fit_card(st, nic.model)  # what the card's firmware exposes (mfctl.mock.nics.firmware.FW_CARDS)
        return st

    def start(self) -> dict:
        inv = self.source
        from mfctl.errors import ConfigError, UsageError

        try:
            self.sshd = hostsshd.choose(self.sshd_wanted)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        (self.state / "hosts").mkdir(mode=0o700, exist_ok=True)
        client_key = paramiko.ECDSAKey.generate(bits=256)
        key_path = self.state / "client_key"
        client_key.write_private_key_file(str(key_path))
        os.chmod(key_path, 0o600)
        self.instance = secrets.token_hex(3)
        password = secrets.token_urlsafe(18)
        pw_path = self.state / "ocs_password"
        pw_path.write_text(password + "\n")
        os.chmod(pw_path, 0o600)

        for o in inv.ocses:
            tx_power = {lane.ocs_tx: LANE_TX_DBM for h in inv.hosts if (on := inv.ocs_of_host(h.name)) is not None
                        and on.name == o.name for _nic, lane in h.ocs_lanes()}
            sid = re.sub(r"[^A-Z0-9-]", "-", o.name.upper())
            self.ocses[o.name] = MockOCS(o.name, OCSEmulator(
                o.size.inputs, o.size.outputs, sid=f"{sid}-{self.instance.upper()}", user=o.user,
                serial=f"MOCK{self.instance.upper()}{secrets.token_hex(3).upper()}",
                password=password, insertion_loss_db=o.insertion_loss_db,
                base_ms=o.switching_time_ms + 16.1, tx_power_dbm=tx_power))
        first = next(iter(self.ocses.values()))
        self.ocs, self.lane_by_rx = first.emulator, first.lane_by_rx
        self.slurm = MockSlurm({h.name: h.gpus.count for h in inv.hosts}, self.state, self.time_scale)
        known_hosts = []
        for hi, h in enumerate(inv.hosts):
            on = inv.ocs_of_host(h.name)
            mo = self.ocses[on.name] if on is not None else first  # (a host with no optical lane: any)
            lanes, states = [], []
            for ni, nic in enumerate(h.nics):
                st = self._nic_state(ni, nic)
                states.append(st)
                for lane in nic.lanes:
                    # the host's name for the lane is the hardware's (sub-port k = PCI function k), whatever
                    # the inventory expects: a wrong inventory name is then a finding, as on real hosts
                    ml = MockLane(st.netdev_of(lane.index), lane.ocs_tx, lane.ocs_rx,
                                  mac=f"b8:ce:f6:{hi:02x}:{ni:02x}:{lane.index:02x}")
                    lanes.append(ml)
                    if lane.ocs_rx is not None:
                        mo.lane_by_rx[lane.ocs_rx] = ml
            view = self if mo is first else _HostView(self, mo)
            mh = MockHost(h.name, h.gpus.count, h.gpus.model, lanes, testbed=view, user=h.ssh.user,
                          gpu_temps=[33 + (hi + g) % 5 for g in range(h.gpus.count)])
            mh.config = HostConfig(mh, self.factory)
            for st in states:
                mh.config.add_nic(st, self.factory)
            self.hosts[h.name] = mh
            if self.sshd == "paramiko":
                hk = paramiko.ECDSAKey.generate(bits=256)
                srv = MockSSHServer(h.name, hk, users={h.ssh.user}, authorized_keys=[client_key], on_exec=mh.handle)
                self.servers[h.name] = srv
                known_hosts.append(f"[127.0.0.1]:{srv.port} {hk.get_name()} {hk.get_base64()}")
        if self.sshd == "openssh":
            real = self._openssh_hosts(client_key)
            self.servers.update((s.name, s) for s in real)  # before starting: stop() closes what started
            hostsshd.start_all(real)
            for s in real:
                known_hosts.extend(s.known_hosts_lines())
        for o in inv.ocses:
            known_hosts.append(self.ocses[o.name].serve(o.user, password))
        # faults before any file says the mock is usable (a bad spec leaves no inventory behind)
        from mfctl.mock import inject

        for spec in self.inject:
            try:
                log.warning("fault injected: %s", inject.apply(self, spec))
            except ValueError as e:  # a command-line value: exit 2, as the exit-code table says
                raise UsageError(str(e)) from None
        (self.state / "known_hosts").write_text("\n".join(known_hosts) + "\n")

        doc = inv.model_dump(mode="json", exclude={"source"})
        # every mock instance is a testbed of its own: its name (the testbed lock, NIC counter history)
        # and its OCS's serial (the device lock and journal) are never another mock's
        doc["name"] = f"{inv.name}-mock-{self.instance}"
        doc["description"] = f"mock of {inv.name} on 127.0.0.1 (written by mfctl mock up; do not edit)"
        doc["ssh"] = {"known_hosts": str(self.state / "known_hosts"), "host_key_policy": "strict"}
        login = getpass.getuser() if self.sshd == "openssh" else None  # a real sshd logs in only its own user
        for h in doc["hosts"]:
            h["ssh"].update(address="127.0.0.1", port=self.servers[h["name"]].port, key_file=str(key_path), agent=False)
            if login:
                h["ssh"]["user"] = login
        for d in [doc["ocs"]] if isinstance(doc["ocs"], dict) else doc["ocs"]:  # (one mapping, or a list)
            mo = self.ocses[d["name"]]
            ep = mo.endpoints()
            d["transports"] = [
                {"kind": "serial", "device": ep["serial"], "baudrate": 115200, "bytesize": 8, "parity": "N", "stopbits": 1},
                {"kind": "ssh", "address": "127.0.0.1", "port": ep["ssh"]},
                {"kind": "tcp", "address": "127.0.0.1", "port": ep["tcp"]},
            ]
            d.update(sid=mo.emulator.sid, serial=mo.emulator.serial, password_env=None, password_file=str(pw_path),
                     known_hosts=str(self.state / "known_hosts"))
        inv_path = self.state / "inventory.yaml"
        inv_path.write_text("# written by `mfctl mock up`; the endpoints live only as long as the mock\n"
                            + yaml.safe_dump(doc, sort_keys=False))
        status = {
            "pid": os.getpid(), "faults": self.inject, "started": time.time(), "source": inv.source, "inventory": str(inv_path),
            "start_ticks": start_ticks(os.getpid()),  # (a later process given the same pid is not this mock)
            "testbed": doc["name"],  # the inventory's name: its testbed lock says which run uses the mock
            "time_scale": self.time_scale, "factory": self.factory, "sshd": self.sshd,
            "hosts": {n: {"address": "127.0.0.1", "port": s.port,
                          **({"sshd_log": str(s.log_path)} if isinstance(s, hostsshd.OpenSSHHost) else {})}
                      for n, s in self.servers.items()},
            "ocs": first.endpoints(),  # the first OCS's (as before several)
            "ocses": {name: mo.endpoints() for name, mo in self.ocses.items()},
        }
        tmp = self.state / "status.json.tmp"
        tmp.write_text(json.dumps(status, indent=2))
        os.replace(tmp, self.state / "status.json")
        return status

    def stop(self) -> None:
        if getattr(self, "slurm", None) is not None:
            self.slurm.stop_all()
        left = [(mh, mh.terminate_all()) for mh in self.hosts.values()]  # every host's at once, one deadline
        deadline = time.monotonic() + HOST_STOP_TIMEOUT_S
        for mh, procs in left:
            mh.reap_all(procs, deadline)
        for s in self.servers.values():
            s.close()
        for mo in getattr(self, "ocses", {}).values():
            mo.close()
        tmp = getattr(self, "_tmp_sockets", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            (self.state / "status.json").unlink()
        except FileNotFoundError:
            pass


class _Stopped(BaseException):
    """SIGTERM/SIGINT/SIGHUP while the mock is still starting: the start is abandoned (what it had
    started is stopped by :meth:`MockTestbed.stop`) instead of coming up for nobody."""


def serve(inventory_path: str, state_dir: str, time_scale: float, factory: bool = False, inject: list[str] = (),
          sshd: str = "auto") -> int:
    """Run the mock in the foreground until SIGTERM/SIGINT/SIGHUP (the watch on the process that
    started it, :mod:`mfctl.mock.owner`, sends SIGTERM once that process is gone), or until its
    ``status.json`` is gone (its state directory deleted: its inventory, keys and sockets with it,
    so nobody can use it; checked every 0.5 s). A signal while
    the mock is still starting abandons the start: what was started is stopped and the mock exits
    0 without saying it is up."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=str(state / "mock.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("paramiko").setLevel(logging.WARNING)  # not 5 lines per SSH connection
    stop = threading.Event()
    starting = [True]  # the first signal while starting raises _Stopped (once: the clean-up is not cut short)

    def on_signal(signum, frame):
        stop.set()
        if starting[0]:
            starting[0] = False
            raise _Stopped(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    tb = None
    try:
        tb = MockTestbed(inventory_path, state, time_scale=time_scale, factory=factory, inject=inject, sshd=sshd)
        tb.start()
        starting[0] = False
        log.info("mock testbed up")
        status = state / "status.json"
        while not stop.wait(0.5):
            if not status.exists():  # its state directory deleted (a test's tmp dir cleaned up after a
                log.warning("%s is gone: stopping (nobody can reach this mock any more)", status)  # killed run)
                break
    except _Stopped:
        log.info("stopped while starting: the start is abandoned")
    finally:
        starting[0] = False
        if tb is not None:
            tb.stop()
        log.info("mock testbed down")
    return 0
