"""The mock's ``torchrun``: what real torchrun (torch 2.13 ``torch.distributed.run``) does with the
options mfctl renders, without importing torch (a real agent costs ~3 s of CPU to start).

Options: ``--nnodes N`` (or ``MIN:MAX``), ``--nproc-per-node N``, ``--node-rank R``,
``--master-addr/--master-port`` (static rendezvous) or ``--rdzv-backend/--rdzv-endpoint/--rdzv-id``
(c10d; the node rank is then ``SLURM_NODEID``, where the real rendezvous assigns one by arrival),
``--rdzv-conf``, ``--max-restarts`` (only 0), ``--monitor-interval``, ``--no-python``, ``-m``.

As real torchrun, it starts ``nproc_per_node`` workers, each in a session of its own, with the
environment torchrun 2.13 gives them (checked by running it: ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``ROLE_NAME``,
``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``
(``none`` for a static rendezvous), ``TORCHELASTIC_RESTART_COUNT``, ``TORCHELASTIC_MAX_RESTARTS``,
``TORCHELASTIC_USE_AGENT_STORE``, ``TORCHELASTIC_ERROR_FILE``, ``TORCHELASTIC_SIGNALS_TO_HANDLE``,
``TORCH_NCCL_ASYNC_ERROR_HANDLING``, ``OMP_NUM_THREADS=1`` when unset and more than one process),
watches them every ``--monitor-interval`` (0.1 s), and ends as it does:

- every worker exited 0: exit 0;
- a worker failed: the others get SIGTERM (their process groups; SIGKILL after
  :data:`CLOSE_TIMEOUT_S`), the log line ``failed (exitcode: RC) local_rank: L (pid: P) of binary:
  B`` and a ``ChildFailedError`` report with its "Root Cause (first observed failure)" on stderr,
  exit 1;
- SIGTERM, SIGINT, SIGHUP or SIGQUIT: ``Received SIG death signal, shutting down workers``, the same
  signal to every worker (SIGKILL after :data:`CLOSE_TIMEOUT_S`), ``SignalException: Process PID got
  signal: SIG`` on stderr, exit 1.

The workers' output is torchrun's own (inherited, not redirected), as with real torchrun's defaults.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime

from mfctl.procs import reap

CLOSE_TIMEOUT_S = 30.0  # torchrun's PContext.close(timeout=30): SIGKILL after this long
MONITOR_INTERVAL_S = 0.1  # torchrun's --monitor-interval default (torch 2.13)
DEATH_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)  # TORCHELASTIC_SIGNALS_TO_HANDLE


def command(choice: str | None = None) -> list[str]:
    """The command a mock host runs for ``torchrun`` (before torchrun's own arguments), by the
    ``mock_torchrun`` setting (``MFCTL_MOCK_TORCHRUN``): ``mock`` — this module; ``real`` — the
    ``torchrun`` beside this Python (torch's console script in the same environment), else the
    first on ``PATH``; or an absolute path. Raises FileNotFoundError naming what is missing."""
    from mfctl import settings

    choice = settings.get("mock_torchrun") if choice is None else choice
    if choice in ("", "mock"):
        return [sys.executable, "-m", "mfctl.mock.slurmshim", "torchrun"]
    if choice == "real":
        beside = os.path.join(os.path.dirname(sys.executable), "torchrun")
        path = beside if os.access(beside, os.X_OK) else shutil.which("torchrun")
        if not path:
            raise FileNotFoundError(f"MFCTL_MOCK_TORCHRUN=real: no torchrun beside {sys.executable} nor on PATH "
                                    "(pip install torch)")
        return [path]
    if not os.path.isabs(choice) or not os.access(choice, os.X_OK):
        raise FileNotFoundError(f"MFCTL_MOCK_TORCHRUN={choice[:200]!r}: expected mock, real or the absolute path "
                                "of an executable torchrun")
    return [choice]


def _log(level: str, where: str, msg: str) -> None:
    """One line in torch's log format (``W1201 14:01:46.830000 4807 torch/…/api.py:1028] msg``)."""
    now = datetime.now()
    print(f"{level}{now:%m%d %H:%M:%S.%f} {os.getpid()} {where}] {msg}", file=sys.stderr, flush=True)


def _parse(args: list[str]) -> tuple[dict[str, str], list[str], bool, bool]:
    opts: dict[str, str] = {}
    no_python = module = False
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a == "--no-python" or a == "--no_python":
            no_python = True
        elif a in ("-m", "--module"):
            module = True
        elif a == "--standalone":
            opts["standalone"] = "1"
        elif "=" in a:
            k, v = a.split("=", 1)
            opts[k.lstrip("-").replace("_", "-")] = v
        elif i + 1 < len(args):
            opts[a.lstrip("-").replace("_", "-")] = args[i + 1]
            i += 1
        i += 1
    return opts, args[i:], no_python, module


def _worker_env(opts: dict[str, str], nnodes: int, nproc: int, node_rank: int, error_dir: str) -> list[dict[str, str]]:
    if "rdzv-endpoint" in opts:
        addr, _, port = opts["rdzv-endpoint"].rpartition(":")
    else:
        addr, port = opts.get("master-addr", "127.0.0.1"), opts.get("master-port", "29500")
    world = nnodes * nproc
    base = dict(os.environ)
    if "OMP_NUM_THREADS" not in base and nproc > 1:
        base["OMP_NUM_THREADS"] = "1"
    base.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
    out = []
    for lr in range(nproc):
        rank = node_rank * nproc + lr
        out.append({**base, "RANK": str(rank), "LOCAL_RANK": str(lr), "GROUP_RANK": str(node_rank),
                    "ROLE_RANK": str(rank), "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc),
                    "WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(world),
                    "MASTER_ADDR": addr, "MASTER_PORT": port, "TORCHELASTIC_RESTART_COUNT": "0",
                    "TORCHELASTIC_MAX_RESTARTS": opts.get("max-restarts", "0"),
                    "TORCHELASTIC_RUN_ID": opts.get("rdzv-id", "none"), "TORCHELASTIC_USE_AGENT_STORE": "True",
                    "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
                    "TORCHELASTIC_ERROR_FILE": os.path.join(error_dir, "attempt_0", str(lr), "error.json")})
    return out


def _close(procs: list[subprocess.Popen], sig: int) -> None:
    """Signal every live worker's process group, wait up to CLOSE_TIMEOUT_S, then SIGKILL."""
    for p in procs:
        if p.poll() is None:
            _log("W", "torch/distributed/elastic/multiprocessing/api.py:1028",
                 f"Sending process {p.pid} closing signal {signal.Signals(sig).name}")
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    reap(procs, time.monotonic() + CLOSE_TIMEOUT_S,
         lambda p: _log("W", "torch/distributed/elastic/multiprocessing/api.py:1046",
                        f"Unable to shutdown process {p.pid} via {signal.Signals(sig)!s}, forcefully exiting via "
                        "Signals.SIGKILL"))


def _failure_report(binary: str, failures: list[tuple[float, int, subprocess.Popen, int]], node_rank: int,
                    nproc: int) -> str:
    """torchrun's ChildFailedError text: the other failures, then the first observed one."""
    def block(i: int, f) -> str:
        t, lr, p, rc = f
        return (f"[{i}]:\n  time      : {datetime.fromtimestamp(t):%Y-%m-%d_%H:%M:%S}\n  host      : "
                f"{os.uname().nodename}\n  rank      : {node_rank * nproc + lr} (local_rank: {lr})\n"
                f"  exitcode  : {rc} (pid: {p.pid})\n  error_file: <N/A>\n"
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")
    first, *others = failures
    bar, rule = "=" * 60, "-" * 60
    out = f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n{bar}\n{binary} FAILED\n{rule}\nFailures:\n"
    out += "".join(block(i + 1, f) for i, f in enumerate(others)) or "  <NO_OTHER_FAILURES>\n"
    return out + f"{rule}\nRoot Cause (first observed failure):\n{block(0, first)}{bar}\n"


def main(args: list[str]) -> int:
    opts, rest, no_python, module = _parse(args)
    if not rest:
        print("torchrun: error: the following arguments are required: training_script, training_script_args",
              file=sys.stderr)
        return 2
    script, sargs = rest[0], rest[1:]
    try:
        nnodes = int(str(opts.get("nnodes", "1")).split(":")[-1])
        nproc = int(opts.get("nproc-per-node", "1"))
        node_rank = int(opts.get("node-rank", os.environ.get("SLURM_NODEID", "0")))
        interval = float(opts.get("monitor-interval", MONITOR_INTERVAL_S))
    except ValueError as e:
        print(f"torchrun: error: argument: invalid value ({e})", file=sys.stderr)
        return 2
    if nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        where = "torch/distributed/run.py:874"
        _log("W", where, "")
        _log("W", where, "*" * 41)
        _log("W", where, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
                         "your system being overloaded, please further tune the variable for optimal performance in "
                         "your application as needed. ")
        _log("W", where, "*" * 41)
    cmd = [script, *sargs] if no_python else [sys.executable, "-u", *(["-m"] if module else []), script, *sargs]
    error_dir = tempfile.mkdtemp(prefix="torchelastic_")
    attempt_dir = tempfile.mkdtemp(prefix=f"{opts.get('rdzv-id', 'none')}_", dir=error_dir)

    got: list[int] = []  # the death signals received: noted, never raised (not inside Popen: a rank would be lost)

    def on_signal(signum, frame):
        got.append(signum)

    old = {s: signal.signal(s, on_signal) for s in DEATH_SIGNALS}
    procs: list[subprocess.Popen] = []
    failures: list[tuple[float, int, subprocess.Popen, int]] = []
    try:
        try:
            for env in _worker_env(opts, nnodes, nproc, node_rank, attempt_dir):
                if got:
                    break
                procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, start_new_session=True))
            while not got:
                states = [p.poll() for p in procs]
                failures = [(time.time(), lr, p, rc) for lr, (p, rc) in enumerate(zip(procs, states)) if rc]
                if failures or all(rc == 0 for rc in states):
                    break
                time.sleep(interval)
        except OSError as e:  # the script cannot be started: torchrun's worker fails at once with its error
            print(f"torchrun: error: {script}: {e.strerror}", file=sys.stderr, flush=True)
            _close(procs, signal.SIGTERM)
            return 1
        if got:
            for s in DEATH_SIGNALS:  # one more while shutting down changes nothing
                signal.signal(s, signal.SIG_IGN)
            _log("W", "torch/distributed/elastic/agent/server/api.py:753",
                 f"Received {got[0]} death signal, shutting down workers")
            _close(procs, got[0])
            print("Traceback (most recent call last):\n  (torchrun's agent was waiting for its workers)\n"
                  f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {os.getpid()} got signal: "
                  f"{got[0]}", file=sys.stderr, flush=True)
            return 1
        if not failures:
            return 0
        _close(procs, signal.SIGTERM)
        others = [(time.time(), lr, p, p.returncode) for lr, p in enumerate(procs)
                  if p.returncode != 0 and all(p is not f[2] for f in failures)]
        t, lr, p, rc = failures[0]
        _log("E", "torch/distributed/elastic/multiprocessing/api.py:1002",
             f"failed (exitcode: {rc}) local_rank: {lr} (pid: {p.pid}) of binary: {script}")
        print(_failure_report(script, [*failures, *others], node_rank, nproc), file=sys.stderr, end="", flush=True)
        return 1
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(error_dir, ignore_errors=True)
