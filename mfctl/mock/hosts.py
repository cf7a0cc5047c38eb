"""Mock GPU servers: simulated state, answered in the real tools' output formats.

Commands (argv after ``shlex.split``):
- ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`` — nvidia-smi's CSV
  (header with units in brackets, ``[N/A]`` for unsupported values);
- ``nvidia-smi -q [-x]``, ``topo -m``, ``nvlink -s`` — see :mod:`mfctl.mock.gputools`;
- ``ip -j link show [dev IF]`` — iproute2 JSON;
- ``hostname``, ``true``, ``echo ...``, ``head -c N /dev/zero`` (a host that prints a lot);
- ``mfctl-simrt ...`` — starts the simulated collective runtime (a real process) and
  streams its output; closing the channel (SIGHUP on a real pty) stops it;
- ``torchrun ...`` — the mock torchrun (:mod:`mfctl.mock.torchrun`), or a real one
  (``MFCTL_MOCK_TORCHRUN``), likewise;
- ``sbatch``, ``squeue``, ``sacct``, ``scancel``, ``scontrol``, ``tail`` — the mock Slurm
  cluster (:mod:`mfctl.mock.slurm`) whose nodes are the mock hosts;
- ``sh -c SCRIPT`` for a few shell built-ins and redirections (:meth:`MockHost._sh`), ``rm -f
  FILE...``; the login directory is the mock's home (``<state>/home``, shared by every host).
Anything else: ``bash: X: command not found``, exit 127.

Every command line a host receives is appended to ``<state>/exec.log`` (host, command): what a
real host's process table (``bash -c COMMAND``) and auditd would show, for tests to inspect.

Optical lanes are UP only when both halves of their duplex circuit are patched on the
OCS emulator and the modelled link-up time (5.67 s mean, 6.33 s p99 — paper App. C,
divided by the time scale) has passed since the last change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mfctl.mock import gputools
from mfctl.mock.gputools import GPUFaults

log = logging.getLogger(__name__)

_exec_lock = threading.Lock()
EXEC_LOG_MAX = 16 << 20  # bytes of exec.log before it is rotated to exec.log.1


def _record_exec(host, command: str) -> None:
    """Append ``command`` (what ``bash -c`` would get on a real host) to ``<state>/exec.log``."""
    state = getattr(host.testbed, "state", None)
    if state is None:
        return
    with _exec_lock, open(state / "exec.log", "a", encoding="utf-8", errors="replace") as f:
        f.write(json.dumps({"t": round(time.time(), 3), "host": host.name, "argv": ["bash", "-c", command]}) + "\n")
        if f.tell() > EXEC_LOG_MAX:
            f.close()
            os.replace(state / "exec.log", state / "exec.log.1")


#: seconds a stopping mock gives the processes its hosts run to end after SIGTERM (torchrun passes it on to
#: its ranks and waits for them), all hosts together, before SIGKILL (within mockctl.STOP_TIMEOUT_S, 10 s)
STOP_TIMEOUT_S = 5.0
LINKUP_MEAN_S = 5.67
LINKUP_SD_S = 0.28  # p99 ≈ mean + 2.33 sd ≈ 6.33 s


@dataclass
class MockLane:
    netdev: str
    ocs_tx: int | None
    ocs_rx: int | None
    mac: str
    mtu: int = 9000


@dataclass
class MockHost:
    name: str
    gpus: int
    gpu_model: str
    lanes: list[MockLane]
    testbed: "object" = None  # MockTestbed (for the OCS state and time scale)
    gpu_temps: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    config: "object" = None  # mfctl.mock.nics.HostConfig
    user: str = "root"  # the SSH login (the Slurm job owner)
    faults: GPUFaults = field(default_factory=GPUFaults)  # GPU fault knobs (tests set them on an in-process mock)
    #: commands that never answer (``--inject gpu02:nvidia-smi=hang[:N]``): program → the 1-based call of it
    #: that hangs (None: every call); a hung command ends when the client closes its channel
    hangs: dict[str, int | None] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # program → calls so far (for hangs)
    #: link-up faults (``--inject gpu02:linkup=slow:30`` / ``=fail``): testbed seconds added to this host's
    #: lanes' link-up after a change, or (None) its optical lanes never come up
    linkup_extra_s: float | None = 0.0

    # --- link state ----------------------------------------------------------------------
    def _linkup_delay(self, port: int, changed: float) -> float:
        """Wall seconds from the last change of a lane's circuit to its link up (paper App. C's
        distribution, seeded by lane and change; plus an injected ``linkup=slow:N``)."""
        h = hashlib.sha256(f"{self.name}:{port}:{changed:.6f}".encode()).digest()
        r = random.Random(h)
        d = min(max(r.gauss(LINKUP_MEAN_S, LINKUP_SD_S), 5.0), 6.6)
        return (d + (self.linkup_extra_s or 0.0)) / self.testbed.time_scale

    def lane_up(self, lane: MockLane) -> bool:
        if lane.ocs_tx is None:
            return True  # EPS-facing lane: always up in the mock
        emu = self.testbed.ocs
        with emu.lock:
            peer_rx = emu.patches.get(lane.ocs_tx)
            if peer_rx is None:
                return False
            peer = self.testbed.lane_by_rx.get(peer_rx)
            if peer is None or emu.patches.get(peer.ocs_tx) != lane.ocs_rx:
                return False
            changed = max(emu.changed_at.get(lane.ocs_tx, 0.0), emu.changed_at.get(peer.ocs_tx, 0.0))
        if self.linkup_extra_s is None:  # linkup=fail: its optical lanes never come up
            return False
        return time.monotonic() - changed >= self._linkup_delay(lane.ocs_tx, changed)

    # --- commands ------------------------------------------------------------------------
    def handle(self, command: str, channel) -> int:
        _record_exec(self, command)
        try:
            argv = shlex.split(command)
        except ValueError as e:
            channel.sendall_stderr(f"bash: syntax error: {e}\n".encode())
            return 2
        env = {}
        if argv and argv[0] == "env":  # env VAR=value ... command
            argv = argv[1:]
            while argv and "=" in argv[0] and not argv[0].startswith("="):
                k, v = argv.pop(0).split("=", 1)
                env[k] = v
        if not argv:
            return 0
        prog = argv[0]
        if prog in self.hangs:
            n = self.calls[prog] = self.calls.get(prog, 0) + 1
            if self.hangs[prog] in (None, n):
                log.warning("%s: %s hangs (injected fault, call %d)", self.name, prog, n)
                while not channel.closed:
                    time.sleep(0.02)
                return 0
        if prog == "nvidia-smi":
            return self._nvidia_smi(argv[1:], channel)
        if prog == "ip":
            return self._ip(argv[1:], channel)
        if prog == "hostname":
            channel.sendall(f"{self.name}\n".encode())
            return 0
        if prog in ("true", "false"):
            return 0 if prog == "true" else 1
        if argv == ["cat", "/proc/uptime"]:  # seconds since boot (and idle): the kernel log's clock
            channel.sendall(f"{gputools.uptime():.2f} {gputools.uptime() * 7.5:.2f}\n".encode())
            return 0
        if prog == "sleep":  # interruptible: a client that gives up closes the channel
            try:
                end = time.monotonic() + float(argv[1]) / self.testbed.time_scale
            except (IndexError, ValueError):
                channel.sendall_stderr(b"sleep: missing or invalid operand\n")
                return 1
            while time.monotonic() < end and not channel.closed:
                time.sleep(0.02)
            return 0
        if prog == "echo":
            channel.sendall((" ".join(argv[1:]) + "\n").encode())
            return 0
        if prog == "head" and argv[1:2] == ["-c"] and argv[3:] in (["/dev/zero"], ["/dev/urandom"]):
            return self._head_c(argv[2], argv[3], channel)
        if prog == "sh" and len(argv) == 3 and argv[1] == "-c":
            if self.config is not None and (rc := self.config.handle(argv, lambda t: channel.sendall(t.encode()),
                                                                     lambda t: channel.sendall_stderr(t.encode()))) is not None:
                return rc  # echo V > /sys/… (mfctl.mock.nics.sysfs)
            return self._sh(argv[2], channel)
        if prog == "rm" and argv[1:2] == ["-f"]:
            for p in argv[2:]:
                try:
                    (self._home() / p).unlink()
                except FileNotFoundError:
                    pass
                except OSError as e:
                    channel.sendall_stderr(f"rm: cannot remove '{p}': {e.strerror}\n".encode())
                    return 1
            return 0
        if prog == "mfctl-simrt":
            return self._spawn([sys.executable, "-m", "mfctl.mock.simruntime", *argv[1:]], channel, env)
        if prog == "torchrun":  # the mock's torchrun, or a real one (MFCTL_MOCK_TORCHRUN: mfctl.mock.torchrun)
            return self._torchrun(argv[1:], channel, env)
        slurm = getattr(self.testbed, "slurm", None)
        if prog == "tail" and slurm is not None:  # job logs on the "shared filesystem" (the mock's home)
            return self._spawn(["tail", *argv[1:]], channel, env, cwd=slurm.home)
        if slurm is not None:
            def read_stdin() -> bytes:
                channel.settimeout(30)
                buf = bytearray()
                while data := channel.recv(65536):
                    buf += data
                return bytes(buf)
            rc = slurm.handle(argv, env, self.user, read_stdin, lambda t: channel.sendall(t.encode()),
                              lambda t: channel.sendall_stderr(t.encode()))
            if rc is not None:
                return rc
        if self.config is not None:
            rc = self.config.handle(argv, lambda t: channel.sendall(t.encode()), lambda t: channel.sendall_stderr(t.encode()))
            if rc is not None:
                return rc
        channel.sendall_stderr(f"bash: line 1: {prog}: command not found\n".encode())
        return 127

    @staticmethod
    def _head_c(count: str, path: str, channel) -> int:
        """``head -c N[K|M|G] /dev/zero`` (or ``/dev/urandom``): N bytes (GNU suffixes: powers of 1024),
        a host that prints a lot; stops when the client hangs up."""
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(count[-1:].upper(), 1)
        digits = count[:-1] if mult > 1 else count
        if not digits.isdigit():
            channel.sendall_stderr(f"head: invalid number of bytes: '{count}'\n".encode())
            return 1
        left = int(digits) * mult
        block = bytes(65536) if path == "/dev/zero" else os.urandom(65536)
        while left > 0 and not channel.closed:
            n = min(left, len(block))
            try:
                channel.sendall(block[:n])
            except OSError:
                return 141  # SIGPIPE, as a shell reports it
            left -= n
        return 0

    def _home(self) -> Path:
        """The login directory: the mock's home, the Slurm cluster's shared filesystem."""
        return self.testbed.slurm.home

    def _sh(self, script: str, channel) -> int:
        """``sh -c SCRIPT`` for the scripts mfctl sends (the run token's file): commands joined
        by ``&&`` among ``umask OOO``, ``set -C`` (noclobber), ``mkdir -p DIR``, ``cat > FILE``
        (stdin into a file created with mode 0666 & ~umask), ``cd DIR`` and ``pwd``; relative
        paths from the login directory. Anything else is ``sh: 1: X: not found`` (127)."""
        try:
            words = shlex.split(script)
        except ValueError:
            channel.sendall_stderr(b"sh: 1: Syntax error: Unterminated quoted string\n")
            return 2
        cmds: list[list[str]] = [[]]
        for w in words:
            cmds.append([]) if w == "&&" else cmds[-1].append(w)
        cwd, mask, noclobber = self._home(), 0o022, False
        fail = lambda msg, rc=2: (channel.sendall_stderr(f"sh: 1: {msg}\n".encode()), rc)[1]  # noqa: E731
        for c in cmds:
            if c[:1] == ["umask"] and len(c) == 2:
                mask = int(c[1], 8)
            elif c == ["set", "-C"]:
                noclobber = True
            elif c[:2] == ["mkdir", "-p"] and len(c) == 3:
                d = cwd
                for part in Path(c[2]).parts:
                    d = d / part
                    if not d.is_dir():
                        try:
                            os.mkdir(d, 0o777 & ~mask)
                        except OSError as e:
                            channel.sendall_stderr(f"mkdir: cannot create directory '{c[2]}': {e.strerror}\n".encode())
                            return 1
            elif c[:1] == ["cat"] and (c[1:2] == [">"] and len(c) == 3 or len(c) == 2 and c[1].startswith(">")):
                target = cwd / (c[2] if len(c) == 3 else c[1][1:])
                flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if noclobber else os.O_TRUNC)
                try:
                    fd = os.open(target, flags, 0o666 & ~mask)
                except OSError as e:
                    return fail(f"cannot create {target}: {e.strerror}")
                channel.settimeout(30)
                with os.fdopen(fd, "wb") as f:
                    while data := channel.recv(65536):
                        f.write(data)
            elif c[:1] == ["cd"] and len(c) == 2:
                if not (cwd / c[1]).is_dir():
                    return fail(f"cd: can't cd to {c[1]}")
                cwd = (cwd / c[1]).resolve()
            elif c == ["pwd"]:
                channel.sendall(f"{cwd}\n".encode())
            else:
                return fail(f"{c[0] if c else ''}: not found", 127)
        return 0

    GPU_FIELDS = {  # query name → (header, value of gputools.gpu(host, i))
        "index": ("index", lambda g: str(g.index)),
        "name": ("name", lambda g: g.name),
        "uuid": ("uuid", lambda g: g.uuid),
        "pci.bus_id": ("pci.bus_id", lambda g: g.bus),
        "temperature.gpu": ("temperature.gpu", lambda g: str(g.temp)),
        "temperature.memory": ("temperature.memory", lambda g: str(g.temp + 8)),
        "power.draw": ("power.draw [W]", lambda g: f"{g.power:.2f} W"),
        "utilization.gpu": ("utilization.gpu [%]", lambda g: "[N/A]" if g.util is None else f"{g.util} %"),
        "memory.used": ("memory.used [MiB]", lambda g: f"{gputools.MEM_USED_MIB} MiB"),
        "memory.total": ("memory.total [MiB]", lambda g: f"{gputools.MEM_TOTAL_MIB} MiB"),
        "ecc.errors.uncorrected.volatile.total": ("ecc.errors.uncorrected.volatile.total", lambda g: str(g.ecc_uncorrected)),
        "persistence_mode": ("persistence_mode", lambda g: "Enabled" if g.persistence else "Disabled"),
        "mig.mode.current": ("mig.mode.current", lambda g: "Enabled" if g.mig else "Disabled"),
        "mig.mode.pending": ("mig.mode.pending", lambda g: "Enabled" if g.mig_pending else "Disabled"),
        "clocks.sm": ("clocks.current.sm [MHz]", lambda g: f"{g.sm} MHz"),
        "clocks.max.sm": ("clocks.max.sm [MHz]", lambda g: f"{gputools.SM_MAX_MHZ} MHz"),
        "pstate": ("pstate", lambda g: "P0"),
        "remapped_rows.uncorrectable": ("remapped_rows.uncorrectable", lambda g: gputools.csv_na(g.remap_uncorrectable)),
        "remapped_rows.pending": ("remapped_rows.pending", lambda g: gputools.csv_na(g.remap_pending)),
        "remapped_rows.failure": ("remapped_rows.failure", lambda g: gputools.csv_na(g.remap_failure)),
        **{f"clocks_{kind}_reasons.{r}": (f"clocks_{kind}_reasons.{r}",
                                           lambda g, r=r: "Active" if r in g.reasons else "Not Active")
           for r in ("gpu_idle", "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
           for kind in ("event", "throttle")},
    }
    driver: int = 535  # the mock driver branch: before 535 only clocks_throttle_reasons.* exist

    def _nvidia_smi(self, args: list[str], channel) -> int:
        ids, args, problem = gputools.select_ids(args, self.gpus, self.name)
        if problem:
            channel.sendall(problem.encode())
            return 6 if problem.startswith("No devices") else 2  # nvidia-smi's "not found" / usage return codes
        lost = [i for i in ids if i in self.faults.lost]
        if lost and not any(a.startswith("--query-gpu") for a in args):  # settings, tables, topology: nothing
            channel.sendall("".join(gputools.lost_line(i) for i in lost).encode())
            return gputools.RC_GPU_LOST
        if args in (["-r"], ["--gpu-reset"]) and self.config is not None:  # a GPU reset makes a pending MIG mode current
            self.config.gpu_mig = getattr(self.config, "gpu_mig_pending", self.config.gpu_mig)
            channel.sendall("".join(f"GPU {gputools.bus_id(i)} was successfully reset.\n" for i in range(self.gpus)).encode()
                            + b"All done.\n")
            return 0
        for flag, attr in (("-pm", "gpu_persistence"), ("-mig", "gpu_mig_pending")):
            if flag in args and self.config is not None:
                v = args[args.index(flag) + 1] if args.index(flag) + 1 < len(args) else ""
                if v not in ("0", "1"):
                    channel.sendall_stderr(f"Invalid value for {flag}: {v!r}\n".encode())
                    return 2
                setattr(self.config, attr, v == "1")
                what = "persistence mode" if flag == "-pm" else "MIG mode"
                if flag == "-mig" and (v == "1") != self.config.gpu_mig:  # A100: pending until a GPU reset (MIG user guide)
                    state = "enable" if v == "1" else "disable"
                    channel.sendall("".join(f"Warning: MIG mode is in pending {state} state for GPU {gputools.bus_id(i)}:"
                                            "In use by another client\n" for i in range(self.gpus)).encode()
                                    + b"All done.\n")
                    return 0
                channel.sendall("".join(f"{'Enabled' if v == '1' else 'Disabled'} {what} for GPU {gputools.bus_id(i)}.\n"
                                        for i in range(self.gpus)).encode() + b"All done.\n")  # host-wide knobs
                return 0
        rc = gputools.nvidia_smi(self, args, lambda t: channel.sendall(t.encode()), lambda t: channel.sendall_stderr(t.encode()),
                                 ids)
        if rc is not None:
            return rc
        q = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
        fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
        if q is None or not fmt.startswith("csv"):
            channel.sendall_stderr(b"mock nvidia-smi: modelled are the default table, -L, --query-gpu=... "
                                   b"--format=csv[,noheader][,nounits], -q, -q -x, topo -m, nvlink -s, -pm 0|1, -mig 0|1 "
                                   b"and -i ID on each\n")
            return 2
        fields = [f.strip() for f in q.split(",") if f.strip()]
        for f in fields:
            if f not in self.GPU_FIELDS or (self.driver < 535 and f.startswith("clocks_event_reasons.")):
                channel.sendall(f'Field "{f}" is not a valid field to query.\n\n'.encode())
                return 2
        opts = set(fmt.split(",")[1:])
        lines = []
        if "noheader" not in opts:
            hdr = [self.GPU_FIELDS[f][0] for f in fields]
            if "nounits" in opts:
                hdr = [h.split(" [")[0] for h in hdr]
            lines.append(", ".join(hdr))
        for i in ids:
            if i in self.faults.lost:  # its row is the tool's complaint; the others are read as usual
                lines.append(gputools.lost_line(i).rstrip("\n"))
                continue
            g = gputools.gpu(self, i)
            vals = [self.GPU_FIELDS[f][1](g) for f in fields]
            if "nounits" in opts:
                vals = [v.rsplit(" ", 1)[0] if v.endswith((" W", " %", " MiB", " MHz")) else v for v in vals]
            lines.append(", ".join(vals))
        channel.sendall(("\n".join(lines) + "\n").encode())
        return gputools.RC_GPU_LOST if self.faults.lost & set(ids) else 0

    def _ip(self, args: list[str], channel) -> int:
        json_out = "-j" in args or "-json" in args
        rest = [a for a in args if not a.startswith("-")]
        if self.config is not None and rest and rest[0] in ("rule", "ru", "route", "ro", "r"):
            from mfctl.mock.nics import routes

            return routes.ip(self.config, ["route" if rest[0] in ("ro", "r") else rest[0]] + rest[1:], json_out,
                             lambda t: channel.sendall(t.encode()), lambda t: channel.sendall_stderr(t.encode()))
        if self.config is not None and len(rest) >= 2 and rest[1] in ("set", "replace", "del"):
            rc = self.config.ip_set(rest, lambda t: channel.sendall(t.encode()), lambda t: channel.sendall_stderr(t.encode()))
            if rc >= 0:
                return rc
        addr = bool(rest) and rest[0] in ("addr", "a", "address")
        if addr:
            rest = ["link"] + rest[1:]
        if not rest or rest[0] not in ("link", "l"):
            channel.sendall_stderr(b'Object "%s" is unknown, try "ip help".\n' % (rest[0].encode() if rest else b""))
            return 1
        dev = rest[rest.index("dev") + 1] if "dev" in rest and rest.index("dev") + 1 < len(rest) else None
        if dev is None and len(rest) >= 3 and rest[1] in ("show", "list", "ls"):
            dev = rest[2]  # ip link show IFNAME ("dev" is optional)
        out = [{"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536, "qdisc": "noqueue",
                "operstate": "UNKNOWN", "linkmode": "DEFAULT", "group": "default", "txqlen": 1000,
                "link_type": "loopback", "address": "00:00:00:00:00:00", "broadcast": "00:00:00:00:00:00"}]
        by_name = {lane.netdev: lane for lane in self.lanes}
        names = self.config.current_netdevs() if self.config is not None else list(by_name)
        for k, nd in enumerate(names):
            lane = by_name.get(nd)
            if lane is None:  # a netdev the inventory does not describe (e.g. before a breakout)
                lane = MockLane(nd, None, None, mac=f"b8:ce:f6:ff:{k:02x}:00")
                up = False
            else:
                up = self.lane_up(lane)
            nds = self.config.netdevs.get(nd) if self.config is not None else None
            o = {"ifindex": k + 2, "ifname": lane.netdev,
                 "flags": ["BROADCAST", "MULTICAST", "UP"] + (["LOWER_UP"] if up else ["NO-CARRIER"]),
                 "mtu": nds.mtu if nds else lane.mtu, "qdisc": "mq", "operstate": "UP" if up else "DOWN",
                 "linkmode": "DEFAULT", "group": "default", "txqlen": 1000, "link_type": "ether", "address": lane.mac,
                 "broadcast": "ff:ff:ff:ff:ff:ff"}
            if ("-d" in args or "-details" in args) and self.config is not None:  # (issue 16 A: parent PCI device)
                o.update(self.config.link_details(nd))
            if addr:
                o["addr_info"] = [{"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1]),
                                   "scope": "global", "label": lane.netdev} for a in (nds.addresses if nds else [])]
            out.append(o)
        if dev:
            out = [o for o in out if o["ifname"] == dev]
            if not out:
                channel.sendall_stderr(f'Device "{dev}" does not exist.\n'.encode())
                return 1
        if json_out:
            channel.sendall((json.dumps(out) + "\n").encode())
        elif "-br" in args or "-brief" in args:  # ip -br link / ip -br addr
            txt = ""
            for o in out:
                tail = " ".join(f"{a['local']}/{a['prefixlen']}" for a in o.get("addr_info", [])) if addr else \
                    f"{o['address']} <{','.join(o['flags'])}>"
                txt += f"{o['ifname']:<16} {o['operstate']:<14} {tail}\n"
            channel.sendall(txt.encode())
        else:
            txt = ""
            for o in out:
                txt += (f"{o['ifindex']}: {o['ifname']}: <{','.join(o['flags'])}> mtu {o['mtu']} "
                        f"qdisc {o['qdisc']} state {o['operstate']} mode DEFAULT group default qlen 1000\n")
                txt += f"    link/{o['link_type']} {o['address']} brd {o['broadcast']}\n"
            channel.sendall(txt.encode())
        return 0

    def _torchrun(self, args: list[str], channel, env: dict) -> int:
        """``torchrun ARGS`` with mfctl's Python environment first on PATH (a real torchrun finds
        ``mfctl-simrt`` there, as on a host where mfctl is installed)."""
        from mfctl.mock import torchrun

        try:
            cmd = torchrun.command()
        except FileNotFoundError as e:
            channel.sendall_stderr(f"bash: line 1: torchrun: {e}\n".encode())
            return 127
        path = env.get("PATH") or os.environ.get("PATH", "/usr/bin:/bin")
        return self._spawn([*cmd, *args], channel, {**env, "PATH": f"{Path(sys.executable).parent}:{path}"})

    def _spawn(self, cmd: list[str], channel, extra_env: dict | None = None, cwd=None) -> int:
        """Run a real process for the session and stream its output; a hang-up stops it."""
        env = dict(os.environ)
        env.update(extra_env or {})
        env["PYTHONUNBUFFERED"] = "1"
        slurm = getattr(self.testbed, "slurm", None)
        if slurm is not None:  # the node's PATH: the mock's torchrun, srun, mfctl-simrt
            env["PATH"] = f"{slurm.bindir}:{env.get('PATH', '/usr/bin:/bin')}"
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            channel.sendall_stderr(f"bash: {cmd[0]}: {e.strerror}\n".encode())
            return 127
        self.procs.append(proc)

        def deliver(sig: int) -> None:  # a signal the session got (a pty's ^C, over a real sshd: mock.relay)
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

        channel.on_signal = deliver  # called by a relayed session (mfctl.mock.relayserver); paramiko's never calls it

        def watch_channel() -> None:
            # a closed channel is a hang-up: stop the runtime like SIGHUP on a real pty
            while proc.poll() is None:
                # a ^C typed at a pty of the paramiko server: its line discipline's SIGINT (over a real sshd
                # the pty is real, and the relay passes the SIGINT on: on_signal)
                if getattr(channel, "mfctl_tty_reads_ctrl_c", False) and channel.recv_ready():
                    try:
                        typed = channel.recv(4096)
                    except OSError:
                        typed = b""
                    if b"\x03" in typed:
                        deliver(signal.SIGINT)
                # (paramiko's channel: the client's EOF comes with its close; a relayed session says when
                # it hung up, and an EOF on stdin alone leaves the command running, as on a real host)
                eof_is_hangup = getattr(channel, "eof_is_hangup", True) and channel.eof_received
                if channel.closed or eof_is_hangup or not channel.get_transport().is_active():
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    return
                time.sleep(0.05)

        threading.Thread(target=watch_channel, daemon=True).start()
        try:
            for line in proc.stdout:
                try:
                    channel.sendall(line)
                except OSError:
                    break
        finally:
            rc = proc.wait()
            self.procs.remove(proc)
        return rc

    def stop_all(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every process this host's sessions run, wait up to ``timeout`` s for them all, then
        SIGKILL those left (:meth:`terminate_all`, :meth:`reap_all`)."""
        self.reap_all(self.terminate_all(), time.monotonic() + timeout)

    def terminate_all(self) -> list[subprocess.Popen]:
        """SIGTERM (their process groups) every process this host's sessions run; returns them."""
        procs = list(self.procs)
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return procs

    def reap_all(self, procs: list[subprocess.Popen], deadline: float) -> None:
        """Wait for ``procs`` until ``deadline`` (time.monotonic()), then SIGKILL the groups of those
        left: a mock that stops leaves nothing running (a torchrun agent it let go ended 0.5-2 s
        after the mock, re-parented to init)."""
        from mfctl.procs import reap

        reap(procs, deadline, lambda p: log.warning("%s: %s still running at the mock's stop: SIGKILL", self.name, p.args))
