"""Render the launch of a training job: exact command lines and environment per host.

- ``sim``: the simulated runtime (``mfctl-simrt``) on every host (the mock testbed);
- ``ssh``: one ``torchrun`` per host with a static rendezvous on the first host;
- ``slurm``: an sbatch script running ``srun --label torchrun`` with a c10d rendezvous;
  the job's output file is under ``runtime.slurm.output_dir`` (see :mod:`mfctl.runtime.slurm`).

NCCL environment: ``NCCL_IB_HCA`` lists the hosts' RDMA devices (all NICs: the OCS lanes
and the EPS NIC), ``NCCL_SOCKET_IFNAME`` is the management interface — never an optical
lane, which goes dark while it is re-wired — plus GID index, traffic class and IB timeout,
and ``MFCTL_CONTROLLER`` / ``MFCTL_RUN_TOKEN`` for the runtime client. The token is shown
as ``<redacted>`` in anything printed, and never travels on a command line: the launchers
write it to a 0600 file on the host (:func:`token_file_command`, the token on the command's
stdin) and pass the file's path as ``MFCTL_RUN_TOKEN_FILE`` (read by
:func:`mfctl.runtime.client.token_from_env`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

TOKEN_ENV, TOKEN_FILE_ENV = "MFCTL_RUN_TOKEN", "MFCTL_RUN_TOKEN_FILE"
#: each Slurm task's first line: ``mfctl-task: $SLURM_PROCID $SLURMD_NODENAME`` (which node ran
#: which task id, as Slurm says: :meth:`mfctl.runtime.slurm.SlurmLaunch.host_of_task`)
TASK_MARK = "mfctl-task:"
REDACTED = "<redacted>"
#: seconds torchrun's rendezvous waits: the static one (SSH launch) for its store (``--rdzv-conf
#: timeout=``), the c10d one (Slurm) for every node to join and for its store (``join_timeout=``,
#: ``read_timeout=``; torch's defaults are 600, 600 and 60 s: torch/distributed/elastic/rendezvous/
#: dynamic_rendezvous.py ``_get_timeout``, c10d_rendezvous_backend.py ``create_backend``): below the
#: run's 30 s wait for every hello (:data:`mfctl.runtime.training.HELLO_TIMEOUT_S`),
#: so an unreachable rendezvous host is torchrun's own error (``DistNetworkError … timed out … while
#: trying to connect to (ADDR, PORT)``, exit 1) in the run's error, not a hello that never came
RDZV_TIMEOUT_S = 25


def redact(text: str, *secrets: str) -> str:
    """``text`` with every secret in ``secrets`` replaced by ``<redacted>`` (for error messages
    and logs built from command lines or remote output)."""
    for sec in secrets:
        if sec:
            text = text.replace(sec, REDACTED)
    return text


def split_token(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without the ``MFCTL_RUN_TOKEN=…`` of its leading ``env VAR=value`` words, and
    that token (None if there is none)."""
    if not argv or argv[0] != "env":
        return list(argv), None
    out, token, i = ["env"], None, 1
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("="):
        k, v = argv[i].split("=", 1)
        if k == TOKEN_ENV:
            token = v
        else:
            out.append(argv[i])
        i += 1
    return out + list(argv[i:]), token


def token_file_command(directory: str, name: str) -> list[str]:
    """The remote command that writes its stdin (the token) to ``directory/name``, a new file
    (``set -C``: never through an existing file or link) created under ``umask 077`` (mode
    0600; a directory it creates: 0700), and prints the directory's absolute path.
    ``directory`` is relative to the login directory (a leading ``~/`` too)."""
    d = directory.removeprefix("~").lstrip("/") if directory.startswith("~") else directory
    d = shlex.quote(d or ".")
    return ["sh", "-c", f"umask 077 && set -C && mkdir -p {d} && cat > {d}/{shlex.quote(name)} && cd {d} && pwd"]


@dataclass
class HostLaunch:
    host: str
    argv: list[str]  # what runs on the host (env is passed with `env VAR=... cmd`)
    env: dict[str, str]

    def command_line(self, redact: bool = True) -> str:
        env = {k: (REDACTED if redact and k == TOKEN_ENV else v) for k, v in self.env.items()}
        return " ".join(shlex.quote(x) for x in ["env", *[f"{k}={v}" for k, v in env.items()], *self.argv])

    def full_argv(self) -> list[str]:
        """``env VAR=value ... command``, the token included: for :meth:`SessionLauncher.start
        <mfctl.runtime.launcher.SessionLauncher.start>`, which moves it to a file before anything runs."""
        return ["env", *[f"{k}={v}" for k, v in self.env.items()], *self.argv]


def nccl_env(pb, inv_host, mgmt_netdev: str) -> dict[str, str]:
    hcas = [nic.rdma_device or f"mlx5_{i}" for i, nic in enumerate(inv_host.nics)]
    n = pb.runtime.nccl
    return {"NCCL_IB_HCA": ",".join(hcas), "NCCL_SOCKET_IFNAME": mgmt_netdev, "NCCL_IB_GID_INDEX": str(n.ib_gid_index),
            "NCCL_IB_TC": str(n.ib_tc), "NCCL_IB_TIMEOUT": str(n.ib_timeout)}


def _script_args(pb) -> list[str]:
    tr = pb.training
    out = list(pb.runtime.script_args)
    if tr.pipeline_degree:
        out += ["--pipeline-degree", str(tr.pipeline_degree)]
    if tr.bp_pipeline_degree:
        out += ["--bp-pipeline-degree", str(tr.bp_pipeline_degree)]
    out += ["--grad-partitions", str(tr.grad_partitions)]
    return out


def _torchrun_script(rt) -> list[str]:
    """The script part of a torchrun command line, by ``runtime.script_mode``."""
    flag = {"python": [], "module": ["-m"], "executable": ["--no-python"]}[rt.script_mode]
    return [*flag, rt.script]


def slurm_output(pb, run_id: str) -> str:
    """The batch job's output file (``%j``: the job id), under ``runtime.slurm.output_dir``."""
    return f"{pb.runtime.slurm.output_dir.rstrip('/')}/mfctl-{run_id}-%j.out"


def render_hosts(pb, inv, controller: str, token: str) -> list[HostLaunch]:
    """Per-host launches for the ``sim`` and ``ssh`` launchers."""
    rt = pb.runtime
    out = []
    hosts = inv.hosts
    for rank, h in enumerate(hosts):
        base = {"MFCTL_CONTROLLER": controller, TOKEN_ENV: token, "MFCTL_HOST": h.name}
        if rt.launcher == "sim":
            argv = [*rt.command, "--controller", controller, "--host", h.name, *_script_args(pb)]
            out.append(HostLaunch(h.name, argv, {TOKEN_ENV: token}))
            continue
        env = {**nccl_env(pb, h, h.mgmt_netdev), **rt.env, **base}
        argv = ["torchrun", "--nnodes", str(len(hosts)), "--nproc-per-node", str(rt.nproc_per_node),
                "--node-rank", str(rank), "--master-addr", hosts[0].ssh.address, "--master-port", str(rt.rdzv_port),
                "--rdzv-conf", f"timeout={RDZV_TIMEOUT_S}", *_torchrun_script(rt), *_script_args(pb)]
        out.append(HostLaunch(h.name, argv, env))
    return out


def render_slurm(pb, inv, controller: str, token: str, run_id: str) -> str:
    """An sbatch script: one task per node, ``srun torchrun`` with a c10d rendezvous. ``token``
    is not used: the script only names the token's file, from the submitting environment
    (:meth:`mfctl.runtime.slurm.SlurmLaunch.submit`)."""
    rt = pb.runtime
    h0 = inv.hosts[0]
    env = {**nccl_env(pb, h0, h0.mgmt_netdev), **rt.env, "MFCTL_CONTROLLER": controller}
    lines = ["#!/bin/bash", f"#SBATCH --job-name=mfctl-{run_id}", f"#SBATCH --nodes={len(inv.hosts)}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={h0.gpus.count}",
             f"#SBATCH --nodelist={','.join(h.name for h in inv.hosts)}", f"#SBATCH --time={rt.slurm.time_limit}",
             f"#SBATCH --output={slurm_output(pb, run_id)}"]
    if rt.slurm.partition:
        lines.append(f"#SBATCH --partition={rt.slurm.partition}")
    if rt.slurm.account:
        lines.append(f"#SBATCH --account={rt.slurm.account}")
    lines += ["set -euo pipefail", *[f"export {k}={shlex.quote(v)}" for k, v in env.items()],
              '# the run token is in a 0600 file on the shared filesystem, named by the submitting environment',
              '# (never in this file, a command line or the environment)',
              f'export {TOKEN_FILE_ENV}="${{{TOKEN_FILE_ENV}:?set by mfctl}}"',
              'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              '# the rendezvous host by the address Slurm reaches it on (NodeAddr; the node name need not resolve)',
              'head_addr=$(scontrol -o show node "$head" | sed -n \'s/.* NodeAddr=\\([^ ]*\\).*/\\1/p\') || head_addr=',
              '# every task: MFCTL_HOST is unset, the runtime client uses $SLURMD_NODENAME (= the inventory name);',
              '# its first line names its node, so mfctl files its output under the host Slurm ran it on',
              " ".join(["srun", "--label", "--kill-on-bad-exit=1", "sh", "-c",
                        shlex.quote(f'echo "{TASK_MARK} $SLURM_PROCID $SLURMD_NODENAME"; exec "$@"'), "mfctl-task",
                        "torchrun", "--nnodes", str(len(inv.hosts)),
                        "--nproc-per-node", str(rt.nproc_per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        f'"${{head_addr:-$head}}:{rt.rdzv_port}"', "--rdzv-id", run_id,
                        "--rdzv-conf", f"join_timeout={RDZV_TIMEOUT_S},read_timeout={RDZV_TIMEOUT_S}",
                        *[shlex.quote(a) for a in [*_torchrun_script(rt), *_script_args(pb)]]])]
    return "\n".join(lines) + "\n"
