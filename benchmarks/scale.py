#!/usr/bin/env python3
"""The main job at scale on the mock (issue 22): 1,024 GPUs — 128 servers x 8 A100 in 16
regions of 8 over 4 mock OCSes (inventory/mfabric-1024.yaml) — launched through the mock's Slurm
with in-training reconfiguration in every region (playbooks/mixtral-slurm-1024-mock.yaml).

Measured in one run (``GPUS=256`` for the 32-server, 4-region, 2-OCS variant):
  - wall time of ``mfctl run`` (mock start, health sweep, OCS, launch, training, teardown);
  - peak memory of every process (this one, the mock and its Slurm job: the process tree),
    sampled every 0.5 s as the sum of each process's PSS (/proc/PID/smaps_rollup: shared pages
    counted once) — and the peak process count;
  - the controller's own CPU per training iteration (thread CPU of the training loop's handling
    of the runtime's messages — receive, predict, decide, plan, log — and of the reconfigurations'
    threads; and the whole mfctl process's CPU, its socket readers, SSH pools and link polls
    included): the journal's ``controller.cpu`` record (mfctl.runtime.training.ControllerCPU),
    against the iteration's testbed time;
  - reconfigurations per region, and each one's time from the policy's decision to every host
    resumed (wall ms; testbed ms = wall x time scale).
Timings on a shared 2-core machine are noisy: the load average is printed at the start and the
end; the CPU figures are steadier than the wall ones.

Last line: one JSON object, {"benchmark": "scale", ...}.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAYBOOKS = {1024: ROOT / "playbooks" / "mixtral-slurm-1024-mock.yaml", 256: ROOT / "playbooks" / "mixtral-slurm-256-mock.yaml"}


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_pss_kib(root: int) -> tuple[int, int]:
    """``(PSS KiB summed over root and its descendants, processes)``."""
    kids, todo, total, n = _children(), [root], 0, 0
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        n += 1
                        break
        except OSError:
            continue
    return total, n


class MemorySampler(threading.Thread):
    def __init__(self, interval_s: float = 0.5):
        super().__init__(daemon=True)
        self.interval_s, self.peak_kib, self.peak_procs = interval_s, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            kib, n = tree_pss_kib(os.getpid())
            self.peak_kib, self.peak_procs = max(self.peak_kib, kib), max(self.peak_procs, n)


def run(gpus: int, runs_dir: Path) -> dict:
    """Run the scale playbook for ``gpus`` (1024 or 256) on a mock of its own; the figures."""
    os.environ.setdefault("MFCTL_MOCK_SSHD", "paramiko")  # one process serves every mock host's SSH
    from mfctl.ocs.journal import Journal
    from mfctl.runtime.job import Job
    from mfctl.runtime.playbook import load_playbook

    pb = load_playbook(str(PLAYBOOKS[gpus]))
    mem = MemorySampler()
    mem.start()
    t0, c0 = time.monotonic(), time.process_time()
    s = Job(pb, runs_dir=str(runs_dir)).run()
    wall = time.monotonic() - t0
    mem.stop.set()
    mem.join()
    recs = Journal(Path(s["run_dir"]) / "journal.jsonl").records()
    cpu = next((r for r in recs if r.get("op") == "controller.cpu"), {})
    by_region: dict[str, int] = {}
    for r in s["reconfigurations"]:
        by_region[r["region"]] = by_region.get(r["region"], 0) + (r["outcome"] == "applied")
    d2r = [r.get("t_decision_to_resume_ms", 0.0) for r in s["reconfigurations"]]
    iter_s = (s.get("iteration_time_s") or {}).get("mean")  # testbed s
    n_iter = max(1, cpu.get("iterations", 0))
    return {"gpus": gpus, "status": s["status"], "error": s.get("error"), "iterations": s["iterations"],
            "time_scale": pb.mock.time_scale,
            "wall_s": round(wall, 1), "bench_process_cpu_s": round(time.process_time() - c0, 2),
            "peak_pss_mib": round(mem.peak_kib / 1024, 1), "peak_processes": mem.peak_procs,
            "controller_handle_cpu_ms_per_iteration": cpu.get("handle_cpu_ms_per_iteration"),
            "controller_reconfig_cpu_ms_per_iteration": round(cpu.get("reconfig_cpu_s", 0.0) / n_iter * 1000, 2),
            "controller_process_cpu_ms_per_iteration": cpu.get("process_cpu_ms_per_iteration"),
            "iteration_testbed_s": iter_s,
            "reconfigurations": len(s["reconfigurations"]), "applied_per_region": dict(sorted(by_region.items())),
            "decision_to_resume_ms_median": round(statistics.median(d2r), 1) if d2r else None,
            "decision_to_resume_ms_max": round(max(d2r), 1) if d2r else None,
            "ocs_wait_ms_max": round(max((r.get("t_ocs_wait_ms", 0.0) for r in s["reconfigurations"]), default=0.0), 2),
            "run_dir": s["run_dir"]}


def main() -> None:
    import tempfile

    gpus = int(os.environ.get("GPUS", "1024"))
    if gpus not in PLAYBOOKS:
        sys.exit(f"GPUS must be one of {sorted(PLAYBOOKS)}")
    load0 = os.getloadavg()[0]
    runs = Path(os.environ.get("RUNS_DIR") or tempfile.mkdtemp(prefix="mfctl-scale-"))
    out = run(gpus, runs)
    out["load_avg_start"], out["load_avg_end"] = round(load0, 2), round(os.getloadavg()[0], 2)
    total_regions = 16 if gpus == 1024 else 4
    it_s = out["iteration_testbed_s"] or 0.0
    hc = out["controller_handle_cpu_ms_per_iteration"] or 0.0
    pc = out["controller_process_cpu_ms_per_iteration"] or 0.0
    rows = [
        ("run", f"{out['status']} ({out['iterations']} iterations, time scale x{out['time_scale']:g})"
                + (f": {out['error']}" if out["error"] else "")),
        ("wall time", f"{out['wall_s']:.1f} s"),
        ("peak memory (all processes, PSS)", f"{out['peak_pss_mib']:.0f} MiB in {out['peak_processes']} processes"),
        ("controller CPU per iteration", f"{hc:.1f} ms handling + {out['controller_reconfig_cpu_ms_per_iteration']:.1f} ms "
                                         f"reconfiguring; {pc:.1f} ms the whole mfctl process"),
        ("  ... of an iteration", f"{hc / 1000 / it_s:.2%} handling, {pc / 1000 / it_s:.2%} process "
                                  f"(iteration {it_s:.2f} s testbed)" if it_s else "?"),
        ("reconfigurations", f"{out['reconfigurations']} ({sum(out['applied_per_region'].values())} applied) in "
                             f"{len(out['applied_per_region'])}/{total_regions} regions: "
                             + ", ".join(f"{k} {v}" for k, v in out["applied_per_region"].items())),
        ("decision to resume", f"median {out['decision_to_resume_ms_median']} ms, max {out['decision_to_resume_ms_max']} ms "
                               f"wall (OCS wait max {out['ocs_wait_ms_max']} ms)"),
        ("load average", f"{out['load_avg_start']} at the start, {out['load_avg_end']} at the end (2 cores, shared)"),
    ]
    w = max(len(k) for k, _ in rows)
    print(f"mfctl main job at {gpus} GPUs on the mock ({PLAYBOOKS[gpus].name})")
    for k, v in rows:
        print(f"  {k:<{w}}  {v}")
    print(json.dumps({"benchmark": "scale", **out}))


if __name__ == "__main__":
    main()
