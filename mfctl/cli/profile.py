"""``mfctl profile`` (fit α + β·n per task) and ``mfctl schedule`` (FSMoE pipeline degrees)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, out_console


def _profile_path(inv) -> Path:
    from mfctl import settings

    d = settings.state_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{inv.name}.json"


@handle_errors
def profile(inventory: Path = typer.Option(..., "--inventory", "-i", envvar="MFCTL_INVENTORY"),
            host: str = typer.Option(None, help="Host to run the sweeps on (default: the first)."),
            hidden: int = typer.Option(4096, min=64), ffn_hidden: int = typer.Option(14336, min=64),
            json_out: bool = JSON_OPT):
    """Run nccl-tests all-to-all and all-reduce sweeps and a GEMM sweep on a host, fit t = α + β·n per task,
    and store the fits (used by mfctl schedule)."""
    import numpy as np
    from rich.table import Table

    from mfctl import settings
    from mfctl.errors import OperationFailed, UsageError
    from mfctl.fabric.profile import fit_linear
    from mfctl.hosts.nccl_tests import parse_perf, perf_argv
    from mfctl.inventory import load_inventory
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    inv = load_inventory(inventory)
    h = host or inv.hosts[0].name
    if h not in {x.name for x in inv.hosts}:
        raise UsageError(f"unknown host {h!r}")
    fits = []
    with SSHPool(targets_from_inventory(inv), connect_timeout=settings.get_float("connect_timeout"),
                 command_timeout=max(settings.get_float("command_timeout"), 300)) as pool:
        for test in ("alltoall_perf", "all_reduce_perf"):
            res = parse_perf(pool.run_checked(h, perf_argv(test, "64K", "1G", 2, inv.host(h).gpus.count)))
            fits.append(fit_linear(test.removesuffix("_perf"), [x.size_bytes for x in res.rows],
                                   [x.time_us * 1e-6 for x in res.rows if x.time_us is not None], "byte"))
        gemm = pool.run_checked(h, ["mfctl-gemm-bench", "--hidden", str(hidden), "--ffn", str(ffn_hidden)])
        rows = [ln.split() for ln in gemm.splitlines() if ln.strip()]
        try:
            flops = [2 * int(m) * int(n) * int(k) for m, n, k, *_ in rows]
            secs = [float(row[3]) * 1e-6 for row in rows]
        except (ValueError, IndexError):
            raise OperationFailed(f"{h}: mfctl-gemm-bench printed something else than 'M N K time_us TFLOP/s'") from None
        fits.append(fit_linear("gemm", np.array(flops), np.array(secs), "flop"))
    doc = {"schema": "mfctl.profile/v1", "inventory": inv.name, "host": h, "fits": [f.to_dict() for f in fits]}
    _profile_path(inv).write_text(json.dumps(doc, indent=2))
    if json_out:
        emit_json(doc | {"path": str(_profile_path(inv))})
        return
    t = Table("task", "α", "rate", "fit error", "points", title=f"profile of {h}")
    for f in fits:
        rate = f"{f.rate / 1e9:.1f} GB/s" if f.unit == "byte" else f"{f.rate / 1e12:.1f} TFLOP/s"
        t.add_row(f.task, f"{f.alpha_s * 1e6:.1f} µs", rate, f"{100 * f.rel_rms_error:.1f}%", str(f.points))
    out_console().print(t)
    out_console().print(f"stored: {_profile_path(inv)}", highlight=False)


@handle_errors
def schedule(playbook: Path = typer.Argument(...), inventory: Path = typer.Option(None, "--inventory", "-i", envvar="MFCTL_INVENTORY"),
             json_out: bool = JSON_OPT):
    """Choose the forward and backward pipeline degrees (r ∈ {1,2,4,8}) and the gradient partitioning for a
    playbook's model, showing the predicted step time of every choice (uses mfctl profile's fits if present)."""
    import itertools

    import numpy as np
    from rich.table import Table

    from mfctl.fabric import mapping
    from mfctl.fabric.planner import LinkRates, plan
    from mfctl.fabric.stepmodel import StepSpec, grad_allreduce_exposed_s, grad_sync_bytes, iteration_time
    from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_to_server
    from mfctl.inventory import load_inventory
    from mfctl.runtime.job import GOODPUT
    from mfctl.runtime.playbook import load_playbook

    pb = load_playbook(playbook)
    inv = load_inventory(inventory or pb.inventory_path())
    fits = {}
    pp = _profile_path(inv)
    if pp.exists():
        fits = {f["task"]: f for f in json.loads(pp.read_text())["fits"]}
    tr = load_routing(pb.model.routing, pb.training.domains)
    m = pb.model
    gps = inv.hosts[0].gpus.count
    reg = inv.regions[0]
    n = len(reg.hosts)
    h0 = inv.host(reg.hosts[0])
    rates = LinkRates(circuit_Bps=h0.ocs_lanes()[0][0].lane_rate_gbps * 1e9 / 8 * GOODPUT,
                      eps_Bps=sum(x.speed_gbps for x in h0.eps_nics()) * 1e9 / 8 * GOODPUT)
    er, rs = expert_to_rank(tr.num_experts, pb.parallelism.ep), rank_to_server(pb.parallelism.ep, pb.parallelism.tp, gps)
    tok = pb.training.seq_len * pb.training.micro_batch
    layers = [np.tile(tr.probs.mean(axis=0)[tr.trace_layer_for(l)] * tok * tr.top_k, (pb.parallelism.ep, 1))
              for l in range(m.layers)]
    from mfctl.fabric.traffic import rank_matrix, server_matrix
    B = np.stack([server_matrix(rank_matrix(t, er, pb.parallelism.ep), rs, n, m.hidden * m.bytes_per_element) for t in layers])
    C = plan(B, np.array([len(mapping.region_lanes(inv, reg.hosts)[x]) for x in reg.hosts]), rates).circuits
    alpha_a2a = fits.get("alltoall", {}).get("alpha_s", 100e-6)
    eta = 0.65
    if "gemm" in fits:
        eta = min(1.0, fits["gemm"]["rate_per_s"] / 312e12)
    # the gradient all-reduce over the EPS, split into p partitions overlapped with backward (FSMoE §5)
    world = sum(inv.host(h).gpus.count for h in reg.hosts)
    alpha_ar = fits.get("all_reduce", {}).get("alpha_s", 22e-6)
    rows = []
    for rf, rb in itertools.product((1, 2, 4, 8), repeat=2):
        spec = StepSpec(hidden=m.hidden, ffn_hidden=m.ffn_hidden, gated=m.gated, bytes_per_element=m.bytes_per_element,
                        ep=pb.parallelism.ep, tp=pb.parallelism.tp, gpus_per_server=gps, tokens_per_rank=tok,
                        eta_expert=eta, alpha_a2a_s=alpha_a2a, pipeline_degree=rf, bp_pipeline_degree=rb)
        it = iteration_time(layers, C, er, rs, pb.training.micro_batches, spec, rates).seconds
        rows.append({"pipeline_degree": rf, "bp_pipeline_degree": rb, "iteration_s": it})
    grad_bytes = grad_sync_bytes(spec, m.layers, tr.num_experts, world)
    parts = [{"partitions": p, "exposed_allreduce_s": grad_allreduce_exposed_s(grad_bytes, p, n, gps, rates.eps_Bps, alpha_ar)}
             for p in (1, 2, 4, 8, 16)]
    bestp = min(parts, key=lambda r: r["exposed_allreduce_s"])
    for r in rows:  # the step time includes the exposed gradient all-reduce of the best partitioning
        r["iteration_s"] += bestp["exposed_allreduce_s"]
    best = min(rows, key=lambda r: r["iteration_s"])
    cmd = (f"mfctl run {playbook} --pipeline-degree {best['pipeline_degree']} "
           f"--bp-pipeline-degree {best['bp_pipeline_degree']} --grad-partitions {bestp['partitions']}")
    if json_out:
        emit_json({"schema": "mfctl.schedule/v1", "profile": str(pp) if fits else None, "choices": rows,
                   "gradient_partitions": parts, "best": best, "best_partitions": bestp["partitions"], "command": cmd})
        return
    t = Table("fwd r", "bwd r", "predicted iteration s", title=f"{m.name}: best 8 of 16 FSMoE pipeline degrees "
              + ("(profiled)" if fits else "(default costs; run mfctl profile)"))
    for r in sorted(rows, key=lambda r: r["iteration_s"])[:8]:
        t.add_row(str(r["pipeline_degree"]), str(r["bp_pipeline_degree"]), f"{r['iteration_s']:.3f}")
    con = out_console()
    con.print(t)
    con.print(f"gradient all-reduce ({grad_bytes / 2**30:.2f} GiB per GPU over the EPS), exposed ms by partitions: "
              + ", ".join(f"{p['partitions']}: {p['exposed_allreduce_s'] * 1e3:.1f}" for p in parts)
              + f" → best {bestp['partitions']} (included above)", highlight=False)
    con.print(f"run with: {cmd}", highlight=False)
