"""A real Slurm 22.05 cluster on this machine for the tests: munged, slurmctld and one
``slurmd -N NAME`` per node, all on 127.0.0.1 and under one temporary directory (plain helper
module: ``from peers_slurm import SlurmCluster, unavailable_reason``; the fixtures are in conftest.py).

- ``SlurmCluster(directory, nodes=("gpu01", …), accounting=False).start()`` writes a munge key,
  ``slurm.conf`` (and with ``accounting`` a MariaDB data directory and ``slurmdbd.conf``) into
  ``directory`` and starts the daemons; ``.env`` is what a client needs (``SLURM_CONF``: nothing
  touches ``/etc/slurm``); ``.close()`` stops every daemon (and every job step they started).
- Nodes: ``NodeName=gpuNN NodeAddr=127.0.0.1 Port=<free>``, 2 CPUs, ``Gres=gpu:8`` (count only,
  no devices), partition ``gpu`` (Default=YES). ``ProctrackType=proctrack/linuxproc``,
  ``TaskPlugin=task/none``: no cgroups. ``MinJobAge`` (how long a finished job stays in the
  controller: ``scontrol show job``, ``squeue -t all``) is ``MIN_JOB_AGE_S``.
- ``CommunicationParameters=NoInAddrAny,NoCtldInAddrAny``: slurmctld and the slurmd's bind
  127.0.0.1, not every address (the test checks with ``ss``).
- With ``accounting``: ``mariadbd --skip-networking`` on a unix socket in the directory (slurmdbd
  finds it by ``MYSQL_UNIX_PORT``), slurmdbd on 127.0.0.1 (slurmdbd.conf's own
  ``CommunicationParameters=NoInAddrAny``: ``DbdAddr`` names it but binds nothing),
  ``AccountingStorageType=accounting_storage/slurmdbd`` with ``AccountingStoragePass`` = the munge
  socket (the controller's connection to slurmdbd does not use ``AuthInfo``'s socket).

Needs root (slurmd runs jobs as the submitting user; munged, slurmd and slurmdbd check their
files' owners) and Debian's ``slurm-wlm``, ``munge`` (+ ``slurmdbd``, ``mariadb-server``):
:func:`unavailable_reason` says what is missing, for a test's skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

MIN_JOB_AGE_S = 300  # slurm.conf MinJobAge (Slurm's default): a finished job stays in the controller this long
START_TIMEOUT_S = 30.0  # for every daemon to answer (the cluster was up in ~2 s here)
BINARIES = {"munged": "munge", "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sbatch": "slurm-client",
            "scontrol": "slurm-client"}
ACCOUNTING_BINARIES = {"slurmdbd": "slurmdbd", "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server",
                       "sacctmgr": "slurm-client"}


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)),
                                      None)


def unavailable_reason(accounting: bool = False) -> str | None:
    """Why a real cluster cannot start here (a test's skip reason), or None."""
    if os.geteuid() != 0:
        return "a real Slurm cluster needs root (slurmd runs jobs as their user; munged checks key ownership)"
    need = {**BINARIES, **(ACCOUNTING_BINARIES if accounting else {})}
    missing = sorted({pkg for b, pkg in need.items() if _which(b) is None})
    if missing:
        return f"{', '.join(missing)} not installed (Debian: apt-get install {' '.join(missing)})"
    return None


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    """munged + slurmctld + ``slurmd -N`` per node (+ mariadbd + slurmdbd) under ``directory``."""

    def __init__(self, directory: str | Path, nodes=("gpu01", "gpu02", "gpu03", "gpu04"), *, accounting: bool = False,
                 partition: str = "gpu", cluster: str = "mfctltest", gpus_per_node: int = 8):
        self.dir = Path(directory).resolve()
        self.nodes, self.accounting, self.partition, self.cluster = list(nodes), accounting, partition, cluster
        self.gpus_per_node = gpus_per_node
        self.procs: dict[str, subprocess.Popen] = {}
        self.startup_s: float | None = None
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.db_socket = self.dir / "mysql" / "mysqld.sock"
        self.env = {"SLURM_CONF": str(self.conf), "MYSQL_UNIX_PORT": str(self.db_socket)}
        ports = free_ports(2 + len(self.nodes))
        self.ctld_port, self.dbd_port, self.node_ports = ports[0], ports[1], dict(zip(self.nodes, ports[2:]))

    # --- files ------------------------------------------------------------------------------
    def _write_config(self) -> None:
        d = self.dir
        for sub in ("munge", "state", "log", "spool", "run", "mysql"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        acct = (f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
                f"AccountingStoragePort={self.dbd_port}\nAccountingStoragePass={self.munge_socket}\n"
                "JobAcctGatherType=jobacct_gather/linux\n"
                if self.accounting else "AccountingStorageType=accounting_storage/none\n"
                                        "JobAcctGatherType=jobacct_gather/none\n")
        names = ",".join(self.nodes)
        self.conf.write_text(
            f"ClusterName={self.cluster}\n"
            f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={self.ctld_port}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\nCredType=cred/munge\n"
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n"
            f"StateSaveLocation={d / 'state'}\nSlurmdSpoolDir={d / 'spool'}/%n\n"
            f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}\nSlurmdPidFile={d / 'run'}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}\nSlurmdLogFile={d / 'log'}/slurmd-%n.log\n"
            "SlurmctldDebug=info\nSlurmdDebug=info\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\nMailProg=/bin/true\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nSchedulerType=sched/backfill\n"
            "SlurmdParameters=config_overrides\nReturnToService=2\nGresTypes=gpu\n"
            "SchedulerParameters=batch_sched_delay=0\n"
            f"MinJobAge={MIN_JOB_AGE_S}\nKillWait=2\nInactiveLimit=0\nWaitTime=0\nMessageTimeout=10\n"
            "SlurmctldTimeout=30\nSlurmdTimeout=30\nJobCompType=jobcomp/none\n"
            f"{acct}"
            + "".join(f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname=localhost Port={p} CPUs=2 Sockets=1 "
                      f"CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN\n"
                      for n, p in self.node_ports.items())
            + f"PartitionName={self.partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP\n")
        # count-only GPUs report 0 to slurmctld (node INVAL): stand-in device files, no GPU driver
        (d / "dev").mkdir(exist_ok=True)
        for i in range(self.gpus_per_node):
            (d / "dev" / f"nvidia{i}").touch()
        files = f"{d / 'dev'}/nvidia[0-{self.gpus_per_node - 1}]"
        (d / "gres.conf").write_text(f"AutoDetect=off\nNodeName={names} Name=gpu File={files}\n")
        for n in self.nodes:
            (d / "spool" / n).mkdir(exist_ok=True)
        if self.accounting:
            dbd = d / "slurmdbd.conf"
            dbd.write_text(
                f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\nDbdAddr=127.0.0.1\nDbdHost=localhost\n"
                f"DbdPort={self.dbd_port}\nSlurmUser=root\nPidFile={d / 'run' / 'slurmdbd.pid'}\n"
                f"LogFile={d / 'log' / 'slurmdbd.log'}\nDebugLevel=info\nStorageType=accounting_storage/mysql\n"
                f"StorageHost=localhost\nStorageUser=root\nStorageLoc=slurm_acct_{self.cluster}\n"
                "CommunicationParameters=NoInAddrAny\n")
            os.chmod(dbd, 0o600)

    # --- daemons ----------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.dir / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                             env={**os.environ, **self.env, **(env or {})})
        log.close()
        self.procs[name] = p
        return p

    def _wait(self, what: str, probe, deadline: float) -> None:
        while True:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}: {self.log_tail(name)}")
            if probe():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {START_TIMEOUT_S:g} s waiting for {what}")
            time.sleep(0.05)

    def run(self, *argv: str, timeout: float = 20.0, check: bool = False) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check,
                              env={**os.environ, **self.env})

    def start(self) -> "SlurmCluster":
        t0 = time.monotonic()
        deadline = t0 + START_TIMEOUT_S
        self._write_config()
        try:
            self._spawn("munged", [_which("munged") or "munged", "-F", "--force", f"--socket={self.munge_socket}",
                                   f"--key-file={self.dir / 'munge' / 'munge.key'}",
                                   f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                                   f"--log-file={self.dir / 'log' / 'munged.log'}",
                                   f"--seed-file={self.dir / 'munge' / 'munged.seed'}"])
            self._wait("munged's socket", self.munge_socket.exists, deadline)
            if self.accounting:
                self._start_accounting(deadline)
            self._spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf)])
            self._wait("slurmctld", lambda: self.run("scontrol", "ping").returncode == 0
                       and "UP" in self.run("scontrol", "ping").stdout, deadline)
            for n in self.nodes:
                self._spawn(f"slurmd-{n}", [_which("slurmd") or "slurmd", "-D", "-N", n, "-f", str(self.conf)])
            self._wait("every node idle", self._all_idle, deadline)
        except BaseException:
            self.close()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _start_accounting(self, deadline: float) -> None:
        data = self.dir / "mysql" / "data"
        r = subprocess.run([_which("mariadb-install-db") or "mariadb-install-db", "--no-defaults", "--user=root",
                            f"--datadir={data}", "--auth-root-authentication-method=socket", "--skip-test-db"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({r.returncode}): {r.stderr[-1500:]}")
        self._spawn("mariadbd", [_which("mariadbd") or "mariadbd", "--no-defaults", "--user=root", f"--datadir={data}",
                                 f"--socket={self.db_socket}", "--skip-networking",
                                 f"--pid-file={self.dir / 'mysql' / 'mariadbd.pid'}",
                                 f"--log-error={self.dir / 'log' / 'mariadbd.log'}",
                                 "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
                                 "--skip-name-resolve"])
        self._wait("mariadbd's socket", self.db_socket.exists, deadline)
        self._spawn("slurmdbd", [_which("slurmdbd") or "slurmdbd", "-D"],
                    env={"SLURM_CONF": str(self.conf)})
        self._wait("slurmdbd", lambda: _listening(self.dbd_port), deadline)

    def _all_idle(self) -> bool:
        r = self.run("sinfo", "-h", "-N", "-o", "%N %t")
        states = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
        return r.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def log_tail(self, name: str, lines: int = 15) -> str:
        out = []
        for p in (self.dir / "log" / f"{name}.out", self.dir / "log" / f"{name}.log"):
            try:
                out += p.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                pass
        return "\n".join(out)

    def pids(self) -> list[int]:
        """Every process this cluster runs now: the daemons and what they started (job steps)."""
        mine = {p.pid for p in self.procs.values() if p.poll() is None}
        out = set(mine)
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    env = (d / "environ").read_bytes()
                except OSError:
                    continue
                if f"SLURM_CONF={self.conf}".encode() in env.split(b"\0"):
                    out.add(int(d.name))
        return sorted(out)

    def close(self) -> None:
        """Stop the daemons (slurmd's first: they end their job steps), SIGKILL what remains."""
        order = [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "slurmdbd", "mariadbd", "munged"]
        for name in order:
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs = {}

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def login_node(cluster: SlurmCluster, directory: str | Path, authorized_keys: list[str], path_dirs=()):
    """A real sshd on 127.0.0.1 standing for the cluster's login node: every session gets the
    cluster's ``SLURM_CONF`` and a ``PATH`` with ``path_dirs`` first (sshd ``SetEnv``), so
    ``sbatch``/``scontrol``/``scancel`` over SSH reach this cluster. Started; ``.close()`` it.
    Offers only an ECDSA host key."""
    from mfctl.mock.openssh import OpenSSHServer

    path = ":".join([*map(str, path_dirs), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"])
    return OpenSSHServer(directory, authorized_keys=authorized_keys, host_key_types=("ecdsa",),
                         env={"SLURM_CONF": str(cluster.conf), "PATH": path}).start()
