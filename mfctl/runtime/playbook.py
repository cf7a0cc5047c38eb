"""Run playbooks: what to train, on which testbed, and how to reconfigure.

Loaded with the same ``file:line`` error reporting as inventories (exit code 3).
Paths in a playbook are relative to the playbook file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mfctl.inventory.loader import load_checked
from mfctl.settings import SETTINGS

DAY = 86400.0  #: the longest timeout or interval a playbook gives (testbed or wall seconds): beyond a day is a typo
_SCALE = SETTINGS["mock_time_scale"]  #: mock.time_scale has the bounds of mfctl mock up --time-scale


class _S(BaseModel):
    """Every float of a playbook is a finite number (``.inf``/``.nan`` are refused at their line:
    they would pass ``gt=0`` and ``le=``, then become timeouts no clock can hold)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class MockSpec(_S):
    enabled: bool = False
    time_scale: float = Field(1.0, ge=_SCALE.min, le=_SCALE.max,
                              description="simulated seconds per wall second (the mock_time_scale setting's bounds: "
                                          "every testbed-second timeout is divided by it)")
    crash_host: str | None = Field(None, description="fault injection: this host's worker dies ...")
    crash_at_iteration: int | None = Field(None, ge=1, description="... at this iteration")
    torchrun: Literal["mock", "real"] | None = Field(
        None, description="the torchrun the run's own mock hosts answer with: mock (mfctl.mock.torchrun) or real "
                          "(torch's, beside mfctl's Python); unset: the mock_torchrun setting (MFCTL_MOCK_TORCHRUN)")
    sshd: Literal["auto", "openssh", "paramiko"] | None = Field(
        None, description="what serves the run's own mock hosts' SSH: a real OpenSSH sshd per host (openssh), "
                          "paramiko servers in the mock's process (paramiko: one process for any number of hosts, "
                          "docs/scale.md), or auto; unset: the mock_sshd setting (MFCTL_MOCK_SSHD)")


class ModelSpec(_S):
    name: str
    routing: Literal["mixtral", "olmoe"] = Field(description="shipped real routing trace")
    layers: int = Field(ge=1, le=512)
    hidden: int = Field(ge=64)
    ffn_hidden: int = Field(ge=64, description="per-expert FFN width")
    gated: bool = True
    bytes_per_element: int = Field(2, ge=1, le=8)


class Parallelism(_S):
    ep: int = Field(ge=1)
    tp: int = Field(1, ge=1)


class Training(_S):
    iterations: int = Field(ge=1, le=1_000_000)
    seq_len: int = Field(4096, ge=1)
    micro_batch: int = Field(1, ge=1)
    micro_batches: int = Field(8, ge=1, le=4096, description="per iteration (gradient accumulation; at most 4,096, "
                               "as mfctl simulate: 100,000 made a run that never finished an iteration)")
    domains: list[str] | None = None
    domain_concentration: float = Field(0.3, gt=0)
    phase_iterations: int = Field(10, ge=1, description="the data mixture changes every N iterations")
    seed: int = 1
    pipeline_degree: Literal[0, 1, 2, 4, 8] = Field(0, description="FSMoE forward pipeline degree (0: best per layer)")
    bp_pipeline_degree: Literal[0, 1, 2, 4, 8] = Field(0, description="backward pipeline degree (0: best per layer)")
    grad_partitions: Literal[1, 2, 4, 8, 16] = Field(8, description="gradient all-reduce partitions overlapped with "
                                                     "backward (FSMoE §5; 8 ≈ bucketed DDP)")


class Topology(_S):
    initial: Literal["random", "planned", "keep"] = Field(
        "planned", description="random: the MixNet simulator's random_connect(); planned: from the trace "
                               "average; keep: the circuits the OCS holds now")
    planner: Literal["greedy", "exact", "local", "best"] = "best"


class Policy(_S):
    enabled: bool = True
    predictor: Literal["ewma", "last"] = Field("ewma", description="what the next iteration's traffic is predicted by")
    ewma_alpha: float = Field(0.5, gt=0, le=1, description="weight of the newest traffic matrix")
    window_iterations: int = Field(20, ge=1, description="horizon over which a gain must repay the cost")
    min_interval_iterations: int = Field(3, ge=1)
    min_gain_s: float = Field(0.0, description="required net gain (s) over the window; negative forces changes")
    min_improvement: float = Field(0.02, ge=0, lt=1, description="required relative improvement of the planner "
                                   "objective (hysteresis against flapping between near-equal topologies)")
    expected_reconfig_s: float = Field(5.72, gt=0, le=DAY, description="prior: OCS 47 ms + link-up 5.67 s (paper App. C)")


class NCCLSpec(_S):
    ib_gid_index: int = Field(3, ge=0, le=255, description="RoCE v2 GID index (show_gids)")
    ib_tc: int = Field(106, ge=0, le=255, description="traffic class = DSCP 26 << 2 | ECN bits (RoCE priority 3)")
    ib_timeout: int = Field(22, ge=1, le=31, description="NCCL_IB_TIMEOUT: 4.096 us * 2^n")


class SlurmSpec(_S):
    partition: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    account: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    time_limit: str = Field("04:00:00", pattern=r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$")
    submit_host: str | None = Field(None, description="host that runs sbatch/scontrol/scancel: a GPU host or one "
                             "of the inventory's login_hosts (default: the first GPU host)")
    output_dir: str = Field("mfctl-runs", pattern=r"^[A-Za-z0-9_./~-]+$",
                            description="job output directory on the cluster's shared filesystem (relative: to the "
                                        "submit host's home)")
    queue_timeout_s: float = Field(600.0, ge=1, le=7 * DAY, description="wall seconds the job may wait in the queue "
                                   "before mfctl cancels it (at most a week)")


class RuntimeSpec(_S):
    launcher: Literal["sim", "ssh", "slurm"] = Field("sim", description="sim: the simulated runtime (mock); ssh: "
                                                     "torchrun per host, static rendezvous; slurm: sbatch + srun torchrun, c10d")
    command: list[str] = Field(default_factory=lambda: ["mfctl-simrt"], min_length=1, description="sim launcher")
    script: str | None = Field(None, description="training script for torchrun (ssh/slurm)")
    script_mode: Literal["python", "module", "executable"] = Field(
        "python", description="how torchrun starts the script: python FILE, python -m MODULE (-m), or the "
                              "program itself (--no-python)")
    script_args: list[str] = Field(default_factory=list)
    nproc_per_node: int = Field(8, ge=1, le=16)
    rdzv_port: int = Field(29500, ge=1024, le=65535)
    env: dict[str, str] = Field(default_factory=dict, description="extra environment (names A-Z0-9_)")
    nccl: NCCLSpec = NCCLSpec()
    slurm: SlurmSpec = SlurmSpec()
    drain_timeout_s: float = Field(60.0, ge=0.05, le=DAY, description="testbed seconds")
    linkup_timeout_s: float = Field(30.0, ge=0.05, le=DAY, description="testbed seconds")
    resume_timeout_s: float = Field(60.0, ge=0.05, le=DAY, description="testbed seconds")
    health_interval_s: float = Field(60.0, ge=0, le=DAY, description="sample health during the run every N testbed "
                                     "seconds (0: off, else at least 1)")

    @field_validator("health_interval_s")
    @classmethod
    def _interval(cls, v: float) -> float:
        if 0 < v < 1:  # a sweep of every host back to back
            raise ValueError("must be 0 (off) or at least 1 testbed second")
        return v


class Playbook(_S):
    name: str
    description: str = ""
    inventory: str
    mock: MockSpec = MockSpec()
    model: ModelSpec
    parallelism: Parallelism
    training: Training
    topology: Topology = Topology()
    policy: Policy = Policy()
    runtime: RuntimeSpec = RuntimeSpec()

    source: str | None = Field(None, exclude=True)

    def inventory_path(self) -> Path:
        p = Path(self.inventory).expanduser()
        return p if p.is_absolute() or not self.source else Path(self.source).parent / p


#: the torch MoE job mfctl ships (``runtime.script`` with ``script_mode: module``), whose arguments are checked at load
TORCH_MOE_JOB = "mfctl.integrations.torch_moe"


def _check(pb: Playbook):
    import re

    problems = []
    for k in pb.runtime.env:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", k):
            problems.append((("runtime", "env", k), f"{k!r} is not an environment variable name"))
    if pb.runtime.launcher in ("ssh", "slurm") and not pb.runtime.script:
        problems.append((("runtime", "launcher"), f"launcher {pb.runtime.launcher} needs runtime.script"))
    sh = pb.runtime.slurm.submit_host
    if sh is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", sh):
        problems.append((("runtime", "slurm", "submit_host"), f"runtime.slurm.submit_host: {sh!r} is not a host name"))
    if pb.mock.crash_at_iteration and not pb.mock.crash_host:
        problems.append((("mock", "crash_at_iteration"), "crash_at_iteration needs crash_host"))
    if pb.training.phase_iterations < 1:
        problems.append((("training", "phase_iterations"), "must be >= 1"))
    rt = pb.runtime
    if rt.launcher in ("ssh", "slurm") and rt.script == TORCH_MOE_JOB and rt.script_mode == "module":
        # mfctl's own job: its command line is checked here, before a testbed is up (else a typo fails
        # every rank after the launch, its argparse line only in the hosts' logs)
        from mfctl.integrations.torch_moe.options import check

        why = check(rt.script_args)
        if why:
            problems.append((("runtime", "script_args"), f"{TORCH_MOE_JOB}: {why}"))
    return problems


def override_fsmoe(pb: Playbook, *, pipeline_degree: int | None = None, bp_pipeline_degree: int | None = None,
                   grad_partitions: int | None = None) -> Playbook:
    """``pb`` with the FSMoE choices given (``mfctl run --pipeline-degree …``; None: the
    playbook's). Raises UsageError (exit 2) for a degree not 1, 2, 4 or 8, or partitions not
    1, 2, 4, 8 or 16."""
    from mfctl.errors import UsageError

    for name, v in (("pipeline_degree", pipeline_degree), ("bp_pipeline_degree", bp_pipeline_degree)):
        if v is not None:
            if v not in (1, 2, 4, 8):
                raise UsageError(f"--{name.replace('_', '-')} must be 1, 2, 4 or 8, not {v}")
            setattr(pb.training, name, v)
    if grad_partitions is not None:
        if grad_partitions not in (1, 2, 4, 8, 16):
            raise UsageError(f"--grad-partitions must be 1, 2, 4, 8 or 16, not {grad_partitions}")
        pb.training.grad_partitions = grad_partitions
    return pb


def line_of(pb: Playbook, *loc: str) -> int | None:
    """The line of ``loc`` (``"parallelism", "ep"``) in the file ``pb`` was loaded from, or of its
    nearest ancestor written there (a field left at its default); None when it cannot be read. For
    the errors of checks made after loading (the playbook against an inventory): the file is read
    again then, only on that error's path."""
    if not pb.source:
        return None
    from mfctl.errors import ConfigError
    from mfctl.inventory.loader import load_yaml_with_lines

    try:
        _, lines = load_yaml_with_lines(pb.source)
    except (ConfigError, OSError):
        return None
    return next((lines[loc[:k]] for k in range(len(loc), 0, -1) if loc[:k] in lines), None)


def load_playbook(path: str | Path) -> Playbook:
    """Load and validate a playbook. Raises ConfigError (exit 3) with file:line."""
    pb = load_checked(path, Playbook, _check)
    pb.source = str(Path(path).resolve())
    return pb
