"""A mock Slurm cluster for the mock testbed: the mock hosts are its nodes.

Every mock host answers the client commands an operator (and ``mfctl run`` with
``runtime.launcher: slurm``) uses, in Slurm 22.05's formats and with its exit codes and error
texts (each checked against a real 22.05 cluster: tests/peers_slurm.py, docs/real-peers.md):

- ``sbatch [--parsable] [options] [SCRIPT]`` — the script from a file, stdin or ``--wrap``,
  ``#SBATCH`` directives honoured (``--job-name``, ``--nodes``, ``--nodelist``, ``--output``,
  ``--time``, ``--chdir``, ``--partition`` (one partition, ``mfabric``: another is refused with
  Slurm's text), ``--account``, ``--ntasks-per-node``, ``--gpus-per-node``); prints ``Submitted
  batch job N`` or, with ``--parsable``, ``N``; an unknown option exits 255. A job asking more
  nodes than the partition has is accepted and stays PENDING (reason ``PartitionConfig``);
- the queue: a job is PENDING (reason ``None``) until the scheduler's next pass
  (:data:`SCHED_DELAY_S`), then RUNNING when its nodes are free, else PENDING ``Resources`` (the
  first job waiting) or ``Priority`` (the ones behind it); once its batch script has ended it is
  COMPLETING until its processes are gone, then COMPLETED / FAILED / CANCELLED / TIMEOUT; the
  controller forgets it :data:`MIN_JOB_AGE_S` (testbed seconds) later;
- ``squeue [-h] [-j IDS] [-t STATES|all] [-o FORMAT]`` (``%i %j %T %t %N %D %M %r %R %u %P``;
  without ``-t`` only pending, running and completing jobs, as Slurm);
- ``scontrol -o show job ID`` (``JobState``, ``Reason``, ``ExitCode`` — ``0:15`` for a
  cancelled job, as the controller says —, ``NodeList``, ``TimeLimit``, …), ``scontrol -o show
  node NAME`` (``State=IDLE|ALLOCATED[+DRAIN]``, ``Reason=TEXT [user@time]``), ``scontrol update
  nodename=NODE state=drain reason=TEXT|state=resume`` (a drained node takes no new job) and
  ``scontrol show hostnames [LIST]``;
- ``sacct [-n] [-P] [-X] -j IDS [-o FIELDS]`` (JobID, JobName, State, ExitCode, Elapsed,
  NodeList, Start, End): ``CANCELLED by UID|0:0``, ``TIMEOUT|0:0``; a batch script that exited
  128+N (srun after ``--kill-on-bad-exit`` terminated the other tasks) reads ``FAILED|N:0``, as
  22.05's accounting showed it;
- ``scancel [-s SIGNAL] ID...`` — of a finished or unknown job: exit 0, silent, as Slurm.

A job runs for real: its batch script is executed by ``/bin/bash`` on this machine with
the Slurm job environment (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ...) and a ``PATH``
that puts the mock's ``srun``, ``scontrol``, ``torchrun`` and ``mfctl-simrt`` first
(:mod:`mfctl.mock.slurmshim`). The "shared filesystem" is the mock's home directory
(``<state>/home``), the submit and default working directory. Time limits run on testbed
time (divided by the time scale), as everything in the mock.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

log = logging.getLogger(__name__)

KILL_WAIT_S = 2.0  # Slurm's KillWait (default 30 s): SIGTERM, then SIGKILL after this long
PARTITIONS = ("mfabric",)  # the cluster's partitions (the first is the default); sbatch refuses others
SCHED_DELAY_S = 0.2  # wall seconds from submit to the scheduler's pass (real 22.05 here: 1-3 s)
MIN_JOB_AGE_S = 300.0  # testbed seconds a finished job stays in the controller (slurm.conf MinJobAge default)
LIVE = ("PENDING", "RUNNING", "COMPLETING")  # what squeue lists without -t
SHORT = {"PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA",
         "TIMEOUT": "TO", "NODE_FAIL": "NF", "OUT_OF_MEMORY": "OOM", "PREEMPTED": "PR"}

SHIMS = ("srun", "scontrol", "torchrun", "mfctl-simrt")


def write_shims(bindir: Path) -> None:
    """Executable wrappers for the programs a job finds on its PATH."""
    bindir.mkdir(parents=True, exist_ok=True)
    for name in SHIMS:
        p = bindir / name
        target = "-m mfctl.mock.simruntime" if name == "mfctl-simrt" else f"-m mfctl.mock.slurmshim {name}"
        p.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {target} \"$@\"\n")
        p.chmod(0o755)


def parse_time_limit(s: str) -> float:
    """Slurm ``--time`` (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) → seconds."""
    days = 0
    if "-" in s:
        d, s = s.split("-", 1)
        days = int(d)
        parts = [int(x) for x in s.split(":")] + [0, 0]
        h, m, sec = parts[:3]
    else:
        parts = [int(x) for x in s.split(":")]
        h, m, sec = {1: (0, parts[0], 0), 2: (0, parts[0], parts[1] if len(parts) > 1 else 0), 3: tuple(parts)}[len(parts)]
    return float(((days * 24 + h) * 60 + m) * 60 + sec)


def format_time_limit(seconds: float) -> str:
    """Seconds → Slurm's ``[D-]HH:MM:SS`` (scontrol's ``TimeLimit``); a whole number of minutes
    as Slurm keeps it (rounded up)."""
    m = int(-(-seconds // 60))
    d, h, mm = m // 1440, m % 1440 // 60, m % 60
    return f"{d}-{h:02d}:{mm:02d}:00" if d else f"{h:02d}:{mm:02d}:00"


@dataclass
class MockJob:
    job_id: int
    name: str
    want: int  # nodes asked for
    nodelist: list[str]  # nodes asked for by name
    user: str
    workdir: Path
    output: Path
    time_limit_s: float
    partition: str
    script: Path
    env: dict = field(repr=False, default_factory=dict)
    nodes: list[str] = field(default_factory=list)  # allocated, in Slurm's order
    state: str = "PENDING"
    reason: str = "None"
    final: str | None = None  # CANCELLED / TIMEOUT, decided while the job is still COMPLETING
    exit_code: int = 0
    signal: int = 0
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    proc: subprocess.Popen | None = None
    cancelled_by: int | None = None
    purged: bool = False  # MinJobAge has passed: the controller (scontrol, squeue) no longer knows it


# sbatch options that take a value, long and short spellings → canonical name
_OPTS = {"--job-name": "job-name", "-J": "job-name", "--nodes": "nodes", "-N": "nodes", "--nodelist": "nodelist",
         "-w": "nodelist", "--output": "output", "-o": "output", "--error": "error", "-e": "error", "--time": "time",
         "-t": "time", "--chdir": "chdir", "-D": "chdir", "--partition": "partition", "-p": "partition",
         "--account": "account", "-A": "account", "--ntasks-per-node": "ntasks-per-node", "--ntasks": "ntasks",
         "-n": "ntasks", "--gpus-per-node": "gpus-per-node", "--export": "export", "--wrap": "wrap",
         "--exclusive": None}


class MockSlurm:
    """The cluster's controller state, shared by every mock host (its nodes)."""

    def __init__(self, nodes: dict[str, int], state_dir: Path, time_scale: float = 1.0):
        self.nodes = nodes  # name → GPUs
        self.home = state_dir / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.spool = state_dir / "slurm-spool"
        self.spool.mkdir(parents=True, exist_ok=True)
        self.bindir = state_dir / "slurm-bin"
        write_shims(self.bindir)
        self.time_scale = time_scale
        self.jobs: dict[int, MockJob] = {}
        self.next_id = 4001
        self.lock = threading.RLock()
        #: drained nodes: name → (reason, user, when) as ``scontrol update … state=drain reason=…`` set it
        self.drained: dict[str, tuple[str, str, str]] = {}

    # --- dispatch ---------------------------------------------------------------------------
    def handle(self, argv: list[str], env: dict, user: str, read_stdin, out, err) -> int | None:
        fn = {"sbatch": self.sbatch, "squeue": self.squeue, "sacct": self.sacct, "scancel": self.scancel,
              "scontrol": self.scontrol}.get(argv[0])
        return None if fn is None else fn(argv[1:], env, user, read_stdin, out, err)

    # --- sbatch -----------------------------------------------------------------------------
    def sbatch(self, args, env, user, read_stdin, out, err) -> int:
        opts, parsable, script_path = {}, False, None
        i = 0
        try:
            while i < len(args):
                a = args[i]
                if a == "--parsable":
                    parsable = True
                elif a == "--exclusive":
                    pass
                elif a.startswith("--") and "=" in a and a.split("=", 1)[0] in _OPTS:
                    k, v = a.split("=", 1)
                    opts[_OPTS[k]] = v
                elif a in _OPTS:
                    opts[_OPTS[a]] = args[i + 1]
                    i += 1
                elif not a.startswith("--") and a[:2] in _OPTS and len(a) > 2:  # -N4, -wgpu01 (getopt's way)
                    opts[_OPTS[a[:2]]] = a[2:]
                elif a.startswith("-"):
                    err(f"sbatch: unrecognized option '{a}'\nTry \"sbatch --help\" for more information\n")
                    return 255  # (real 22.05's exit status for a usage error)
                else:
                    script_path = a
                    break
                i += 1
        except IndexError:
            err(f"sbatch: option '{args[-1]}' requires an argument\nTry \"sbatch --help\" for more information\n")
            return 255
        if "wrap" in opts:
            script = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{opts['wrap']}\n"
        elif script_path is not None:
            p = Path(script_path).expanduser()
            p = p if p.is_absolute() else self.home / p
            try:
                script = p.read_text()
            except OSError:
                err(f"sbatch: error: Unable to open file {script_path}\n")
                return 1
        else:
            script = read_stdin().decode(errors="replace")
        if not script.startswith("#!"):
            err("sbatch: error: This does not look like a batch script.  The first\n"
                "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
                "sbatch: error: For instance: #!/bin/sh\n")
            return 1
        directives = {}
        for line in script.splitlines()[1:]:
            s = line.strip()
            if s and not s.startswith("#"):
                break  # directives end at the first command, as in Slurm
            if s.startswith("#SBATCH"):
                try:
                    words = shlex.split(s[len("#SBATCH"):])
                except ValueError:
                    continue
                for w in words:
                    if "=" in w and w.split("=", 1)[0] in _OPTS:
                        k, v = w.split("=", 1)
                        directives[_OPTS[k]] = v
        directives.update(opts)  # the command line wins over #SBATCH lines
        o = directives
        fail = lambda msg: (err(f"sbatch: error: Batch job submission failed: {msg}\n"), 1)[1]  # noqa: E731
        try:
            nodelist = list(NodeSet(o["nodelist"])) if o.get("nodelist") else []
        except NodeSetParseError:
            return fail("Invalid node name specified")
        if any(n not in self.nodes for n in nodelist):
            return fail("Invalid node name specified")
        try:
            n_opt = str(o.get("nodes", "")).split("-")[0]  # --nodes=N or MIN-MAX: the minimum
            want = int(n_opt) if n_opt else (len(nodelist) or 1)
        except ValueError:
            return fail("Invalid node count specification")
        if nodelist and want < len(nodelist):
            return fail("Node count specification invalid")
        gpn = str(o.get("gpus-per-node") or "")
        if gpn and any(int(re.sub(r"^.*:", "", gpn)) > g for g in self.nodes.values()):
            return fail("Requested node configuration is not available")
        if o.get("partition", PARTITIONS[0]) not in PARTITIONS:
            err(f"sbatch: error: invalid partition specified: {o['partition']}\n")
            return fail("Invalid partition name specified")
        try:
            limit = parse_time_limit(o.get("time", "1-00:00:00"))
        except (ValueError, KeyError):
            return fail("Invalid time limit specification")
        with self.lock:
            jid = self.next_id
            self.next_id += 1
        name = o.get("job-name") or ("wrap" if "wrap" in o else Path(script_path).name if script_path else "sbatch")
        workdir = Path(o["chdir"]).expanduser() if o.get("chdir") else self.home
        workdir = workdir if workdir.is_absolute() else self.home / workdir
        outpat = o.get("output", "slurm-%j.out").replace("%j", str(jid)).replace("%x", name).replace("%u", user)
        output = Path(outpat).expanduser()
        output = output if output.is_absolute() else workdir / output
        spath = self.spool / f"job{jid}.sh"
        spath.write_text(script)
        jenv = {**os.environ, **env, "PATH": f"{self.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "SLURM_JOB_ID": str(jid), "SLURM_JOBID": str(jid), "SLURM_JOB_NAME": name,
                "SLURM_SUBMIT_DIR": str(self.home), "SLURM_NTASKS_PER_NODE": o.get("ntasks-per-node", "1"),
                "SLURM_CLUSTER_NAME": "mfabric-mock", "PYTHONUNBUFFERED": "1"}
        job = MockJob(jid, name, want, nodelist, user, workdir, output, limit, o.get("partition", PARTITIONS[0]),
                      spath, jenv)
        with self.lock:
            self.jobs[jid] = job
        threading.Timer(SCHED_DELAY_S, self._schedule).start()
        out(f"{jid}\n" if parsable else f"Submitted batch job {jid}\n")
        return 0

    # --- the scheduler ------------------------------------------------------------------------
    def _schedule(self) -> None:
        """One pass, first come first served: a job starts when its nodes are free; the first that
        cannot waits for ``Resources``, the ones behind it for ``Priority``."""
        with self.lock:
            self._purge()
            busy = {n for j in self.jobs.values() if j.state in ("RUNNING", "COMPLETING") for n in j.nodes}
            blocked = False
            for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
                if job.state != "PENDING" or time.time() - job.submitted < SCHED_DELAY_S * 0.9:
                    continue
                if job.want > len(self.nodes):
                    job.reason = "PartitionConfig"  # more nodes than the partition has: never runs
                    continue
                if blocked:
                    job.reason = "Priority"
                    continue
                free = [n for n in self.nodes if n not in busy and n not in self.drained]  # a drained node takes no job
                if any(n in busy or n in self.drained for n in job.nodelist) or len(free) < job.want:
                    job.reason, blocked = "Resources", True
                    continue
                rest = [n for n in free if n not in job.nodelist]
                chosen = set(job.nodelist) | set(rest[: job.want - len(job.nodelist)])
                job.nodes = [n for n in self.nodes if n in chosen]  # Slurm's order, not the request's
                busy |= chosen
                self._start(job)

    def _busy_nodes(self) -> set[str]:
        return {n for j in self.jobs.values() if j.state in ("RUNNING", "COMPLETING") for n in j.nodes}

    def _start(self, job: MockJob) -> None:
        try:
            job.output.parent.mkdir(parents=True, exist_ok=True)
            outf = open(job.output, "ab")
        except OSError as e:
            job.state, job.reason, job.exit_code, job.ended = "FAILED", "JobLaunchFailure", 1, time.time()
            log.warning("mock Slurm job %s: cannot open its output %s: %s", job.job_id, job.output, e.strerror)
            return
        job.env.update({"SLURM_JOB_NODELIST": str(NodeSet.fromlist(job.nodes)), "SLURM_NNODES": str(len(job.nodes)),
                        "SLURM_JOB_NUM_NODES": str(len(job.nodes)), "SLURM_JOB_PARTITION": job.partition,
                        "SLURMD_NODENAME": job.nodes[0]})
        job.state, job.reason, job.started = "RUNNING", "None", time.time()
        job.proc = subprocess.Popen(["/bin/bash", str(job.script)], cwd=str(job.workdir), env=job.env, stdout=outf,
                                    stderr=outf, stdin=subprocess.DEVNULL, start_new_session=True)
        outf.close()
        threading.Thread(target=self._watch, args=(job,), daemon=True, name=f"slurm-job-{job.job_id}").start()

    def _purge(self) -> None:
        """Forget jobs that ended more than MinJobAge ago (the controller's view; accounting keeps them)."""
        age = MIN_JOB_AGE_S / self.time_scale
        for jid in [j.job_id for j in self.jobs.values() if j.ended and time.time() - j.ended > age]:
            self.jobs[jid].purged = True

    def _watch(self, job: MockJob) -> None:
        assert job.proc is not None
        deadline = time.monotonic() + job.time_limit_s / self.time_scale
        while True:
            try:
                rc = job.proc.wait(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline and job.state == "RUNNING":
                    with open(job.output, "a") as f:
                        f.write(f"slurmstepd: error: *** JOB {job.job_id} ON {job.nodes[0]} CANCELLED AT "
                                f"{datetime.now():%Y-%m-%dT%H:%M:%S} DUE TO TIME LIMIT ***\n")
                    job.state, job.final = "COMPLETING", "TIMEOUT"
                    self._kill(job)
        with self.lock:
            job.state = "COMPLETING"  # the batch script has ended; its job's processes are being reaped
        t_end = time.monotonic() + KILL_WAIT_S + 1
        while _group_alive(job.proc.pid) and time.monotonic() < t_end:
            time.sleep(0.02)
        time.sleep(0.05)  # (the epilog)
        with self.lock:
            job.ended = time.time()
            if rc < 0:
                job.exit_code, job.signal = 0, -rc
            else:
                job.exit_code = rc
            job.state = job.final or ("COMPLETED" if rc == 0 else "FAILED")
            job.reason = "NonZeroExitCode" if job.state == "FAILED" else ("TimeLimit" if job.state == "TIMEOUT" else "None")
        self._schedule()

    def _kill(self, job: MockJob, sig: int = signal.SIGTERM) -> None:
        """SIGTERM the job's whole process group; SIGKILL after KillWait."""
        proc = job.proc
        if proc is None:
            return

        def send(s):
            try:
                os.killpg(proc.pid, s)
            except (ProcessLookupError, PermissionError):
                pass
        send(sig)
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            def later():
                if proc.poll() is None or _group_alive(proc.pid):
                    send(signal.SIGKILL)
            threading.Timer(KILL_WAIT_S, later).start()

    # --- queries ----------------------------------------------------------------------------
    def _select(self, args, err, cmd) -> tuple[list[MockJob] | None, dict]:
        flags: dict = {}
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("-j", "--jobs", "-o", "--format", "-u", "--user", "-s", "--signal", "-t", "--states"):
                if i + 1 >= len(args):
                    err(f"{cmd}: option '{a}' requires an argument\n")
                    return None, flags
                flags[a.lstrip("-")[0] if a.startswith("--") else a[1]] = args[i + 1]
                i += 2
                continue
            if a.startswith(("--jobs=", "--format=", "--user=", "--signal=", "--states=")):
                k, v = a.split("=", 1)
                flags[k[2]] = v
            elif a.startswith("-") and len(a) > 1 and not a.startswith("--"):
                for ch in a[1:]:
                    flags[ch] = True
            elif a.startswith("--"):
                flags[{"--noheader": "h", "--parsable2": "P", "--allocations": "X", "--noconvert": "_"}.get(a, a)] = True
            else:
                flags.setdefault("positional", []).append(a)
            i += 1
        want = flags.get("j") if isinstance(flags.get("j"), str) else None
        with self.lock:
            if want is None:
                return list(self.jobs.values()), flags
            try:
                ids = [int(x) for x in want.split(",") if x]
            except ValueError:
                err(f"{cmd}: error: Invalid job id: {want}\n")
                return None, flags
            return [self.jobs[j] for j in ids if j in self.jobs], flags

    def _in_controller(self, jobs: list[MockJob]) -> list[MockJob]:
        with self.lock:
            self._purge()
            return [j for j in jobs if not j.purged]

    def squeue(self, args, env, user, read_stdin, out, err) -> int:
        jobs, f = self._select(args, err, "squeue")
        if jobs is None:
            return 1
        jobs = self._in_controller(jobs)
        if isinstance(f.get("j"), str) and not jobs:
            err("slurm_load_jobs error: Invalid job id specified\n")
            return 1
        states = f.get("t") if isinstance(f.get("t"), str) else None
        if states is None:
            shown = [j for j in jobs if j.state in LIVE]
        elif states.lower() == "all":
            shown = jobs
        else:
            want = {x.strip().upper() for x in states.split(",")}
            shown = [j for j in jobs if j.state in want or SHORT.get(j.state) in want]
        fmt = f.get("o") if isinstance(f.get("o"), str) else "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"

        def field_(j, c):
            el = int((j.ended or time.time()) - (j.started or time.time()))
            nl = str(NodeSet.fromlist(j.nodes)) if j.nodes else ""
            return {"i": str(j.job_id), "j": j.name, "T": j.state, "t": SHORT.get(j.state, "CD"), "N": nl,
                    "D": str(len(j.nodes) or j.want), "M": f"{el // 60}:{el % 60:02d}", "r": j.reason,
                    "R": f"({j.reason})" if j.state == "PENDING" else nl, "u": j.user, "P": j.partition}.get(c, "")

        hdr = {"i": "JOBID", "j": "NAME", "T": "STATE", "t": "ST", "N": "NODELIST", "D": "NODES", "M": "TIME",
               "r": "REASON", "R": "NODELIST(REASON)", "u": "USER", "P": "PARTITION"}

        def render(row_fn):
            return re.sub(r"%(\.?\d+)?([A-Za-z])", lambda m: _pad(row_fn(m.group(2)), m.group(1)), fmt)

        lines = [] if f.get("h") else [render(lambda c: hdr.get(c, c))]
        lines += [render(lambda c, j=j: field_(j, c)) for j in shown]
        out("".join(ln + "\n" for ln in lines))
        return 0

    SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"

    def sacct(self, args, env, user, read_stdin, out, err) -> int:
        jobs, f = self._select(args, err, "sacct")
        if jobs is None:
            return 1
        fo = f.get("o")
        fields = (fo if isinstance(fo, str) else self.SACCT_DEFAULT).split(",")

        def val(j, name):
            n = name.split("%")[0].lower()
            el = int((j.ended or time.time()) - (j.started or time.time()))
            state = j.state + (f" by {j.cancelled_by}" if j.state == "CANCELLED" and j.cancelled_by is not None else "")
            code = "0:0" if j.state in ("CANCELLED", "TIMEOUT") else (
                f"{j.exit_code - 128}:0" if j.exit_code > 128 else f"{j.exit_code}:{j.signal}")
            ts = lambda t: datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S") if t else "Unknown"  # noqa: E731
            return {"jobid": str(j.job_id), "jobname": j.name, "partition": j.partition, "account": "mfabric",
                    "alloccpus": str(2 * len(j.nodes)), "state": state, "exitcode": code,
                    "elapsed": f"{el // 3600:02d}:{el % 3600 // 60:02d}:{el % 60:02d}",
                    "nodelist": str(NodeSet.fromlist(j.nodes)) if j.nodes else "None assigned",
                    "start": ts(j.started), "end": ts(j.ended), "nnodes": str(len(j.nodes)), "user": j.user}.get(n, "")

        lines = []
        if not f.get("n") and not f.get("h"):
            lines.append(("|" if f.get("P") else " ").join(x.split("%")[0] for x in fields))
        for j in jobs:
            row = [val(j, x) for x in fields]
            lines.append("|".join(row) if f.get("P") else " ".join(f"{v:>10}" for v in row))
        out("".join(ln + "\n" for ln in lines))
        return 0

    def scancel(self, args, env, user, read_stdin, out, err) -> int:
        jobs, f = self._select(["-j", ",".join(a for a in args if a.isdigit())] + [a for a in args if not a.isdigit()],
                               err, "scancel")
        if jobs is None:
            return 1
        ids = [a for a in args if a.isdigit()]
        if not ids:
            err("scancel: error: No job identification provided\n")
            return 1
        sig = signal.SIGTERM
        if isinstance(f.get("s"), str):
            name = f["s"].upper().removeprefix("SIG")
            try:
                sig = signal.Signals[f"SIG{name}"] if not name.isdigit() else signal.Signals(int(name))
            except (KeyError, ValueError):
                err(f"scancel: error: Invalid signal name: {f['s']}\n")
                return 1
        known = {j.job_id: j for j in jobs}
        for a in ids:
            j = known.get(int(a))
            if j is None or j.state not in ("PENDING", "RUNNING"):
                continue  # a finished or unknown job: real 22.05 exits 0 and says nothing
            if not isinstance(f.get("s"), str) or sig == signal.SIGKILL:  # a cancel, not just a signal
                with self.lock:
                    j.cancelled_by = os.getuid()
                    if j.state == "PENDING":
                        j.state, j.ended, j.reason = "CANCELLED", time.time(), j.reason
                        continue
                    j.state, j.final = "COMPLETING", "CANCELLED"
                with open(j.output, "a") as fh:
                    fh.write(f"slurmstepd: error: *** JOB {j.job_id} ON {j.nodes[0]} CANCELLED AT "
                             f"{datetime.now():%Y-%m-%dT%H:%M:%S} ***\n")
            self._kill(j, sig)
        return 0

    def scontrol(self, args, env, user, read_stdin, out, err) -> int:
        one_line = bool(args) and args[0] in ("-o", "--oneliner")
        rest = args[1:] if one_line else args
        if rest[:2] == ["show", "job"] and len(rest) == 3:
            return self._show_job(rest[2], one_line, out, err)
        if rest[:1] == ["update"]:
            return self._update_node(rest[1:], user, out, err)
        if rest[:2] == ["show", "node"] and len(rest) == 3 and rest[2] in self.nodes:
            return self._show_node(rest[2], one_line, out)
        return scontrol(args, env, out, err)

    def _update_node(self, words: list[str], user: str, out, err) -> int:
        """``scontrol update nodename=NODE state=drain reason=TEXT`` / ``state=resume``, with Slurm
        22.05's refusals (checked against a real cluster: tests/peers_slurm.py): a drain without a
        reason, an unknown node, a resume of a node that is not drained — all exit 1."""
        kv = {}
        for w in words:
            k, eq, v = w.partition("=")
            if not eq:
                err(f"scontrol: error: Invalid input: {w}\nRequest aborted\n")
                return 1
            kv[k.lower()] = v
        node, state = kv.get("nodename"), kv.get("state", "").lower()
        if node is None or state not in ("drain", "resume", "undrain"):
            err("scontrol: error: mock scontrol update models only nodename=NODE state=drain|resume [reason=TEXT]\n")
            return 1
        with self.lock:
            if node not in self.nodes:
                err("slurm_update error: Invalid node name specified\n")
                return 1
            if state == "drain":
                if not kv.get("reason"):
                    err("You must specify a reason when DOWNING or DRAINING a node. Request denied\n")
                    return 1
                self.drained[node] = (kv["reason"], user, datetime.now().strftime("%Y-%m-%dT%H:%M:%S"))
                return 0
            if node not in self.drained:
                err("slurm_update error: Invalid node state specified\n")
                return 1
            del self.drained[node]
        threading.Timer(SCHED_DELAY_S, self._schedule).start()  # a resumed node takes the waiting jobs
        return 0

    def _show_node(self, name: str, one_line: bool, out) -> int:
        """``scontrol [-o] show node NAME``: ``State=IDLE|ALLOCATED`` (+``DRAIN`` once drained:
        ``ALLOCATED+DRAIN`` while a job still runs there — sinfo's *draining* —, ``IDLE+DRAIN`` after
        — *drained*) and, when drained, ``Reason=TEXT [user@time]`` last, as Slurm 22.05 prints them."""
        with self.lock:
            base = "ALLOCATED" if name in self._busy_nodes() else "IDLE"
            d = self.drained.get(name)
        words = [f"NodeName={name}", "Arch=x86_64", "NodeAddr=127.0.0.1", f"NodeHostName={name}",
                 f"State={base}{'+DRAIN' if d else ''}", f"Partitions={PARTITIONS[0]}"]
        if d:
            words.append(f"Reason={d[0]} [{d[1]}@{d[2]}]")
        out((" ".join(words) if one_line else "   ".join(words)) + "\n")
        return 0

    def _show_job(self, spec: str, one_line: bool, out, err) -> int:
        try:
            jobs = self._in_controller([self.jobs[int(spec)]]) if int(spec) in self.jobs else []
        except ValueError:
            jobs = []
        if not jobs:
            err("slurm_load_jobs error: Invalid job id specified\n")
            return 1
        j = jobs[0]
        ts = lambda t: datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S") if t else "Unknown"  # noqa: E731
        nl = str(NodeSet.fromlist(j.nodes)) if j.nodes else ""
        req = str(NodeSet.fromlist(j.nodelist)) if j.nodelist else "(null)"
        code = f"{j.exit_code}:{j.signal}" if j.ended else "0:0"
        if j.state == "CANCELLED" and j.ended and j.started:
            code = "0:15"  # the batch script killed by scancel's SIGTERM, as the controller keeps it
        groups = [
            [f"JobId={j.job_id}", f"JobName={j.name}"],
            [f"UserId={j.user}(0)", "GroupId=root(0)", "MCS_label=N/A"],
            [f"JobState={j.state}", f"Reason={j.reason}", "Dependency=(null)"],
            [f"ExitCode={code}"],
            [f"TimeLimit={format_time_limit(j.time_limit_s)}", "TimeMin=N/A"],
            [f"SubmitTime={ts(j.submitted)}", f"StartTime={ts(j.started)}", f"EndTime={ts(j.ended)}"],
            [f"Partition={j.partition}", "AllocNode:Sid=localhost:1"],
            [f"ReqNodeList={req}", "ExcNodeList=(null)"],
            [f"NodeList={nl}", f"BatchHost={j.nodes[0] if j.nodes else '(null)'}"],
            [f"NumNodes={len(j.nodes) or j.want}", f"NumCPUs={len(j.nodes) or j.want}"],
            [f"WorkDir={j.workdir}", f"StdOut={j.output}"],
        ]
        out((" ".join(w for g in groups for w in g) if one_line else "\n".join("   " + " ".join(g) for g in groups)
             .lstrip()) + "\n")
        return 0

    def stop_all(self) -> None:
        for j in list(self.jobs.values()):
            if j.proc is not None and j.proc.poll() is None:
                self._kill(j, signal.SIGKILL)


def _pad(v: str, spec: str | None) -> str:
    """squeue's ``%.Nx`` (right-justified, truncated) and ``%Nx`` (left-justified) widths."""
    if not spec:
        return v
    right, w = spec.startswith("."), int(spec.lstrip("."))
    v = v[:w]
    return v.rjust(w) if right else v.ljust(w)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def scontrol(args, env, out, err) -> int:
    """``scontrol show hostnames [LIST]`` (LIST defaults to ``$SLURM_JOB_NODELIST``) and
    ``scontrol [-o] show node NAME`` (every mock node is on ``127.0.0.1``); what a job's shell
    calls, without the controller's state."""
    one_line = bool(args) and args[0] in ("-o", "--oneliner")
    args = args[1:] if one_line else args
    if args[:2] == ["show", "node"] and len(args) == 3:
        name = args[2]
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            err(f"Node {name} not found\n")
            return 1
        words = [f"NodeName={name}", "Arch=x86_64", "NodeAddr=127.0.0.1", f"NodeHostName={name}", "State=ALLOCATED",
                 f"Partitions={PARTITIONS[0]}"]
        out((" ".join(words) if one_line else "   ".join(words)) + "\n")
        return 0
    if args[:2] != ["show", "hostnames"]:
        err(f"scontrol: error: mock scontrol models only `show hostnames`, `show node` and `show job`, "
            f"not {' '.join(args[:2])!r}\n")
        return 1
    spec = args[2] if len(args) > 2 else env.get("SLURM_JOB_NODELIST", "")
    try:
        out("".join(f"{n}\n" for n in NodeSet(spec)))
    except NodeSetParseError as e:
        err(f"scontrol: error: Invalid hostlist: {spec} ({e})\n")
        return 1
    return 0
