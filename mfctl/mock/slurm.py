"""A mock Slurm cluster for the mock testbed: the mock hosts are its nodes.

Every mock host answers the client commands an operator (and ``mfctl run`` with
``runtime.launcher: slurm``) uses, in Slurm's formats:

- ``sbatch [--parsable] [options] [SCRIPT]`` — the script from a file or stdin, ``#SBATCH``
  directives honoured (``--job-name``, ``--nodes``, ``--nodelist``, ``--output``,
  ``--time``, ``--chdir``, ``--partition`` (one partition, ``mfabric``: another is refused as
  by Slurm), ``--account``, ``--ntasks-per-node``, ``--gpus-per-node``); prints ``Submitted
  batch job N`` or, with ``--parsable``, ``N``;
- ``squeue [-h] [-j IDS] [-o FORMAT]`` (``%i %j %T %t %N %D %M %R %u``);
- ``sacct [-n] [-P] [-X] -j IDS [-o FIELDS]`` (JobID, JobName, State, ExitCode, Elapsed,
  NodeList, Start, End);
- ``scancel [-s SIGNAL] ID...``;
- ``scontrol show hostnames [LIST]``.

A job runs for real: its batch script is executed by ``/bin/bash`` on this machine with
the Slurm job environment (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``, ...) and a ``PATH``
that puts the mock's ``srun``, ``scontrol``, ``torchrun`` and ``mfctl-simrt`` first
(:mod:`mfctl.mock.slurmshim`). The "shared filesystem" is the mock's home directory
(``<state>/home``), the submit and default working directory. Time limits run on testbed
time (divided by the time scale), as everything in the mock.
"""

from __future__ import annotations

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

KILL_WAIT_S = 2.0  # Slurm's KillWait (default 30 s): SIGTERM, then SIGKILL after this long
PARTITIONS = ("mfabric",)  # the cluster's partitions (the first is the default); sbatch refuses others

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


@dataclass
class MockJob:
    job_id: int
    name: str
    nodes: list[str]
    user: str
    workdir: Path
    output: Path
    time_limit_s: float
    partition: str
    state: str = "PENDING"
    exit_code: int = 0
    signal: int = 0
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    proc: subprocess.Popen | None = None
    cancelled_by: int | None = None


# sbatch options that take a value, long and short spellings → canonical name
_OPTS = {"--job-name": "job-name", "-J": "job-name", "--nodes": "nodes", "-N": "nodes", "--nodelist": "nodelist",
         "-w": "nodelist", "--output": "output", "-o": "output", "--error": "error", "-e": "error", "--time": "time",
         "-t": "time", "--chdir": "chdir", "-D": "chdir", "--partition": "partition", "-p": "partition",
         "--account": "account", "-A": "account", "--ntasks-per-node": "ntasks-per-node", "--ntasks": "ntasks",
         "-n": "ntasks", "--gpus-per-node": "gpus-per-node", "--export": "export", "--exclusive": None}


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
        self.lock = threading.Lock()

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
                elif a.startswith("-"):
                    err(f"sbatch: unrecognized option '{a}'\nTry \"sbatch --help\" for more information\n")
                    return 1
                else:
                    script_path = a
                    break
                i += 1
        except IndexError:
            err(f"sbatch: option '{args[-1]}' requires an argument\n")
            return 1
        if script_path is not None:
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
        if want > len(self.nodes) or (nodelist and want < len(nodelist)):
            return fail("Requested node configuration is not available")
        if o.get("gpus-per-node") and any(int(re.sub(r"^.*:", "", o["gpus-per-node"])) > g for g in self.nodes.values()):
            return fail("Requested node configuration is not available")
        if o.get("partition", PARTITIONS[0]) not in PARTITIONS:
            err(f"sbatch: error: invalid partition specified: {o['partition']}\n")
            return fail("Invalid partition name specified")
        nodes = nodelist + [n for n in self.nodes if n not in nodelist][: want - len(nodelist)]
        try:
            limit = parse_time_limit(o.get("time", "1-00:00:00"))
        except (ValueError, KeyError):
            return fail("Invalid time limit specification")
        with self.lock:
            jid = self.next_id
            self.next_id += 1
        name = o.get("job-name") or (Path(script_path).name if script_path else "sbatch")
        workdir = Path(o["chdir"]).expanduser() if o.get("chdir") else self.home
        workdir = workdir if workdir.is_absolute() else self.home / workdir
        outpat = o.get("output", "slurm-%j.out").replace("%j", str(jid)).replace("%x", name).replace("%u", user)
        output = Path(outpat).expanduser()
        output = output if output.is_absolute() else workdir / output
        job = MockJob(jid, name, nodes, user, workdir, output, limit, o.get("partition", PARTITIONS[0]))
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            outf = open(output, "ab")
        except OSError as e:
            return fail(f"cannot open the output file {output}: {e.strerror}")
        spath = self.spool / f"job{jid}.sh"
        spath.write_text(script)
        jenv = {**os.environ, **env, "PATH": f"{self.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "SLURM_JOB_ID": str(jid), "SLURM_JOBID": str(jid), "SLURM_JOB_NAME": name,
                "SLURM_JOB_NODELIST": str(NodeSet.fromlist(nodes)), "SLURM_NNODES": str(len(nodes)),
                "SLURM_JOB_NUM_NODES": str(len(nodes)), "SLURM_SUBMIT_DIR": str(self.home),
                "SLURM_JOB_PARTITION": job.partition, "SLURM_NTASKS_PER_NODE": o.get("ntasks-per-node", "1"),
                "SLURMD_NODENAME": nodes[0], "SLURM_CLUSTER_NAME": "mfabric-mock", "PYTHONUNBUFFERED": "1"}
        with self.lock:
            self.jobs[jid] = job
            job.state, job.started = "RUNNING", time.time()
            job.proc = subprocess.Popen(["/bin/bash", str(spath)], cwd=str(workdir), env=jenv, stdout=outf,
                                        stderr=outf, stdin=subprocess.DEVNULL, start_new_session=True)
        outf.close()
        threading.Thread(target=self._watch, args=(job,), daemon=True, name=f"slurm-job-{jid}").start()
        out(f"{jid}\n" if parsable else f"Submitted batch job {jid}\n")
        return 0

    def _watch(self, job: MockJob) -> None:
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
                    job.state = "TIMEOUT"
                    self._kill(job)
        with self.lock:
            job.ended = time.time()
            if rc < 0:
                job.exit_code, job.signal = 0, -rc
            else:
                job.exit_code = rc
            if job.state == "RUNNING":
                job.state = "COMPLETED" if rc == 0 else "FAILED"

    def _kill(self, job: MockJob, sig: int = signal.SIGTERM) -> None:
        """SIGTERM the job's whole process group; SIGKILL after KillWait."""
        def send(s):
            try:
                os.killpg(job.proc.pid, s)
            except (ProcessLookupError, PermissionError):
                pass
        send(sig)
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            def later():
                if job.proc.poll() is None or _group_alive(job.proc.pid):
                    send(signal.SIGKILL)
            threading.Timer(KILL_WAIT_S, later).start()

    # --- queries ----------------------------------------------------------------------------
    def _select(self, args, err, cmd) -> tuple[list[MockJob] | None, dict]:
        flags, ids, i = {}, None, 0
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

    def squeue(self, args, env, user, read_stdin, out, err) -> int:
        jobs, f = self._select(args, err, "squeue")
        if jobs is None:
            return 1
        live = [j for j in jobs if j.state in ("PENDING", "RUNNING", "COMPLETING")]
        if isinstance(f.get("j"), str) and not live and not jobs:
            err("slurm_load_jobs error: Invalid job id specified\n")
            return 1
        fmt = f.get("o") if isinstance(f.get("o"), str) else "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
        short = {"PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG"}

        def field_(j, c):
            el = int(time.time() - (j.started or time.time()))
            return {"i": str(j.job_id), "j": j.name, "T": j.state, "t": short.get(j.state, "CD"),
                    "N": str(NodeSet.fromlist(j.nodes)),
                    "D": str(len(j.nodes)), "M": f"{el // 60}:{el % 60:02d}", "R": str(NodeSet.fromlist(j.nodes)),
                    "u": j.user, "P": j.partition}.get(c, "")

        hdr = {"i": "JOBID", "j": "NAME", "T": "STATE", "t": "ST", "N": "NODELIST", "D": "NODES", "M": "TIME",
               "R": "NODELIST(REASON)", "u": "USER", "P": "PARTITION"}

        def render(row_fn):
            return re.sub(r"%(\.?\d+)?([A-Za-z])", lambda m: _pad(row_fn(m.group(2)), m.group(1)), fmt)

        lines = [] if f.get("h") else [render(lambda c: hdr.get(c, c))]
        lines += [render(lambda c, j=j: field_(j, c)) for j in live]
        out("".join(ln + "\n" for ln in lines))
        return 0

    SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"

    def sacct(self, args, env, user, read_stdin, out, err) -> int:
        jobs, f = self._select(args, err, "sacct")
        if jobs is None:
            return 1
        fields = (f.get("o") if isinstance(f.get("o"), str) else self.SACCT_DEFAULT).split(",")

        def val(j, name):
            n = name.split("%")[0].lower()
            el = int((j.ended or time.time()) - (j.started or time.time()))
            state = j.state + (f" by {j.cancelled_by}" if j.state == "CANCELLED" and j.cancelled_by is not None else "")
            ts = lambda t: datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S") if t else "Unknown"  # noqa: E731
            return {"jobid": str(j.job_id), "jobname": j.name, "partition": j.partition, "account": "mfabric",
                    "alloccpus": str(2 * len(j.nodes)), "state": state, "exitcode": f"{j.exit_code}:{j.signal}",
                    "elapsed": f"{el // 3600:02d}:{el % 3600 // 60:02d}:{el % 60:02d}",
                    "nodelist": str(NodeSet.fromlist(j.nodes)),
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
        rc = 0
        known = {j.job_id: j for j in jobs}
        for a in ids:
            j = known.get(int(a))
            if j is None or j.state not in ("PENDING", "RUNNING"):
                err(f"scancel: error: Kill job error on job id {a}: "
                    f"{'Invalid job id specified' if j is None else 'Job/step already completing or completed'}\n")
                rc = 1
                continue
            if not isinstance(f.get("s"), str) or sig == signal.SIGKILL:  # a cancel, not just a signal
                j.state, j.cancelled_by = "CANCELLED", os.getuid()
                with open(j.output, "a") as fh:
                    fh.write(f"slurmstepd: error: *** JOB {j.job_id} ON {j.nodes[0]} CANCELLED AT "
                             f"{datetime.now():%Y-%m-%dT%H:%M:%S} ***\n")
            self._kill(j, sig)
        return rc

    def scontrol(self, args, env, user, read_stdin, out, err) -> int:
        return scontrol(args, env, out, err)

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
    """``scontrol show hostnames [LIST]`` (LIST defaults to ``$SLURM_JOB_NODELIST``)."""
    if args[:2] != ["show", "hostnames"]:
        err(f"scontrol: error: mock scontrol models only `show hostnames`, not {' '.join(args[:2])!r}\n")
        return 1
    spec = args[2] if len(args) > 2 else env.get("SLURM_JOB_NODELIST", "")
    try:
        out("".join(f"{n}\n" for n in NodeSet(spec)))
    except NodeSetParseError as e:
        err(f"scontrol: error: Invalid hostlist: {spec} ({e})\n")
        return 1
    return 0
