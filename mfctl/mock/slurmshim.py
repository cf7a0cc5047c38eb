"""The programs a mock Slurm job (or a mock host's shell) finds on its PATH:
``srun``, ``scontrol`` and ``torchrun`` (``python -m mfctl.mock.slurmshim PROG ARGS``).

- ``srun [--label] [--kill-on-bad-exit[=1]] [-N N] COMMAND...`` inside an allocation: one
  task per allocated node (``--ntasks-per-node=1``), each with ``SLURM_PROCID``,
  ``SLURM_NODEID``, ``SLURM_LOCALID``, ``SLURMD_NODENAME``; ``--label`` prefixes every
  output line with the task id (``0: ``); a task failing with ``--kill-on-bad-exit``
  terminates the others (``srun: error: NODE: task I: Exited with exit code RC``, then
  ``Terminating StepId=J.0`` and each killed task's ``*** STEP J.0 ON NODE CANCELLED ***``, as
  real 22.05's srun); srun exits with the highest task exit code (128+N for signal N);
  SIGTERM/SIGINT/SIGHUP are forwarded to every task.
- packed tasks (the mock's economy at scale, issue 22): with ``MFCTL_MOCK_PACK=K`` in the job's
  environment (a playbook's ``runtime.env``; real Slurm ignores it) srun starts one process per
  K consecutive tasks instead of one per task, with ``MFCTL_MOCK_PACK_TASKS`` listing them
  (``RANK=NODE,…``, the first being the process's own ``SLURM_PROCID``/``SLURMD_NODENAME``). A
  line the process writes as ``@pack RANK TEXT`` is task RANK's ``TEXT`` (labelled ``RANK: ``),
  any other line the first task's. The simulated runtime simulates every host of its pack
  (:mod:`mfctl.mock.simruntime`); a pack that fails is each of its tasks failing.
- ``torchrun``: :mod:`mfctl.mock.torchrun` — ``nproc_per_node`` workers per node with real
  torchrun's environment, failure and signal handling (only local rank 0 of the simulated
  runtime connects; the others follow it). Under Slurm the node rank is ``SLURM_NODEID``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from ClusterShell.NodeSet import NodeSet


def _forward_signals(procs: list[subprocess.Popen]) -> None:
    """Pass SIGTERM/SIGINT/SIGHUP on to the children. They stay in the job's process group, so
    a SIGKILL to the group (scancel after KillWait, the mock stopping) reaches them too."""
    def handler(signum, frame):
        for p in procs:
            try:
                p.send_signal(signum)
            except (ProcessLookupError, PermissionError):
                pass
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


def srun(args: list[str]) -> int:
    label, kill_bad, i = False, False, 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in ("--label", "-l"):
            label = True
        elif a in ("--kill-on-bad-exit", "-K") or a.startswith("--kill-on-bad-exit="):
            kill_bad = not a.endswith("=0")
        elif a in ("-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node", "-w", "--nodelist"):
            i += 1
        elif a.startswith(("--nodes=", "--ntasks=", "--ntasks-per-node=", "--nodelist=", "--export=", "--mpi=", "--cpu-bind=")):
            pass
        else:
            print(f"srun: unrecognized option '{a}'", file=sys.stderr)
            return 1
        i += 1
    cmd = args[i:]
    if not cmd:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    if "SLURM_JOB_ID" not in os.environ:
        print("srun: error: mock srun runs only inside an allocation (sbatch)", file=sys.stderr)
        return 1
    nodes = list(NodeSet(os.environ.get("SLURM_JOB_NODELIST", "")))
    width = len(str(len(nodes) - 1))
    procs: list[subprocess.Popen] = []
    _forward_signals(procs)
    out_lock = threading.Lock()
    pack = _pack_size()
    firsts = list(range(0, len(nodes), pack))  # the first task of each process (every task without packing)
    for rank in firsts:
        node = nodes[rank]
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_NODEID=str(rank), SLURM_LOCALID="0",
                   SLURMD_NODENAME=node, SLURM_NTASKS=str(len(nodes)), SLURM_STEP_ID="0", SLURM_STEPID="0",
                   SLURM_STEP_NODELIST=os.environ.get("SLURM_JOB_NODELIST", ""))
        if pack > 1:
            env[PACK_TASKS_ENV] = ",".join(f"{r}={nodes[r]}" for r in range(rank, min(rank + pack, len(nodes))))
        try:
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        except OSError as e:
            print(f"srun: error: {node}: task {rank}: {cmd[0]}: {e.strerror}", file=sys.stderr)
            for p in procs:
                p.kill()
            return 2

    def pump(rank: int, p: subprocess.Popen) -> None:
        prefix = f"{rank:>{width}}: ".encode() if label else b""
        for line in p.stdout:
            pre = prefix
            if pack > 1 and line.startswith(PACK_MARK):  # a packed task's line: labelled as that task
                r, _, line = line[len(PACK_MARK):].partition(b" ")
                pre = f"{int(r):>{width}}: ".encode() if label and r.isdigit() else pre
            with out_lock:
                sys.stdout.buffer.write(pre + line)
                sys.stdout.buffer.flush()

    pumps = [threading.Thread(target=pump, args=(r, p), daemon=True) for r, p in zip(firsts, procs)]
    for t in pumps:
        t.start()
    worst, pending, killing = 0, dict(zip(firsts, procs)), False
    step = f"{os.environ.get('SLURM_JOB_ID', '0')}.0"
    while pending:
        for rank, p in list(pending.items()):
            try:
                rc = p.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            del pending[rank]
            if rc != 0:
                what = f"Exited with exit code {rc}" if rc > 0 else signal.strsignal(-rc)  # "Terminated", "Killed"
                print(f"srun: error: {nodes[rank]}: task {rank}: {what}", file=sys.stderr, flush=True)
                worst = max(worst, rc if rc > 0 else 128 - rc)  # the highest exit code, 128+N for signal N
                if kill_bad and not killing and pending:
                    killing = True  # as real 22.05's srun says it, then each killed task's slurmstepd
                    print(f"srun: launch/slurm: _step_signal: Terminating StepId={step}", file=sys.stderr, flush=True)
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
                    for r, q in pending.items():
                        with out_lock:
                            sys.stdout.write(f"{r:>{width}}: " if label else "")
                            sys.stdout.write(f"slurmstepd-{nodes[r]}: error: *** STEP {step} ON {nodes[r]} "
                                             f"CANCELLED AT {stamp} ***\n")
                            sys.stdout.flush()
                        try:
                            q.terminate()
                        except ProcessLookupError:
                            pass
    for t in pumps:
        t.join(timeout=2)
    return worst


PACK_ENV, PACK_TASKS_ENV = "MFCTL_MOCK_PACK", "MFCTL_MOCK_PACK_TASKS"
PACK_MARK = b"@pack "  # a packed process's line for one of its other tasks: ``@pack RANK TEXT``


def _pack_size() -> int:
    """Tasks per process (``MFCTL_MOCK_PACK``, default 1: one process per task, as Slurm)."""
    raw = os.environ.get(PACK_ENV, "1")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def pack_tasks(environ=None) -> list[tuple[int, str]]:
    """The ``(rank, node)`` tasks this process stands for (``MFCTL_MOCK_PACK_TASKS``); [] when
    it is one task's, as without packing."""
    env = os.environ if environ is None else environ
    out = []
    for item in env.get(PACK_TASKS_ENV, "").split(","):
        r, eq, node = item.partition("=")
        if eq and r.isdigit() and node:
            out.append((int(r), node))
    return out


def torchrun(args: list[str]) -> int:
    """The mock torchrun (:mod:`mfctl.mock.torchrun`): ``nproc_per_node`` workers per node; or,
    with ``MFCTL_MOCK_TORCHRUN`` naming a real one, that torchrun in this process's place."""
    from mfctl.mock import torchrun as mock_torchrun

    cmd = mock_torchrun.command()
    if cmd[0] != sys.executable:
        os.execv(cmd[0], [cmd[0], *args])
    return mock_torchrun.main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog, args = argv[0], argv[1:]
    if prog == "srun":
        return srun(args)
    if prog == "torchrun":
        return torchrun(args)
    if prog == "scontrol":
        from mfctl.mock.slurm import scontrol
        return scontrol(args, os.environ, sys.stdout.write, sys.stderr.write)
    print(f"{prog}: not a mock Slurm program", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())
