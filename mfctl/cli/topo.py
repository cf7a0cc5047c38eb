"""``mfctl topo plan|eval`` — circuits for a traffic matrix, and topologies compared."""

from __future__ import annotations

from pathlib import Path

import typer

from mfctl.cli.common import JSON_OPT, emit_json, handle_errors, number_option, option, out_console

app = typer.Typer(help="Plan OCS circuits from a traffic matrix and compare topologies.", no_args_is_help=True)

TRAFFIC_ARG = typer.Argument(..., help="Traffic matrix: CSV, JSON or NPY (server bytes, or EP-rank x expert tokens).")
KIND_OPT = typer.Option("server-bytes", "--kind", help="server-bytes or tokens (JSON files may say it themselves).")
INV_OPT = option("inventory", "--inventory", "-i", default=None, help="Take ports, lanes and rates from this inventory.")
REGION_OPT = typer.Option(None, "--region", help="Region of the inventory (default: the first).")
PORTS_OPT = typer.Option(3, "--ports", min=1, max=64, help="OCS lanes per server, without an inventory.")
LANE_OPT = number_option(100.0, "--lane-gbps", min=1.0, max=1e5, help="Rate of one optical lane, Gbit/s (without an inventory).")
EPS_OPT = number_option(100.0, "--eps-gbps", min=1.0, max=1e6, help="EPS rate per server, Gbit/s (without an inventory).")
TP_OPT = typer.Option(1, "--tp", min=1, max=64, help="Tensor parallelism (tokens input).")
GPS_OPT = typer.Option(8, "--gpus-per-server", min=1, max=256, help="GPUs per server (tokens input).")
HIDDEN_OPT = typer.Option(4096, "--hidden", min=1, max=1 << 20, help="Hidden size (tokens input).")
BPE_OPT = typer.Option(2, "--bytes-per-element", min=1, max=16, help="Bytes per activation element (tokens input).")


def _ms(seconds: float, unit: bool = True) -> str:
    """Seconds as milliseconds for people: 2 decimals, or 4 significant digits once that is absurd."""
    v = seconds * 1e3
    return (f"{v:.2f}" if abs(v) < 1e6 else f"{v:.4g}") + (" ms" if unit else "")


def _setup(traffic, kind, inventory, region, ports, lane_gbps, eps_gbps, tp, gps, hidden, bpe):
    import numpy as np

    from mfctl.errors import ConfigError, UsageError
    from mfctl.fabric.matrixio import TrafficSpec, load_traffic
    from mfctl.fabric.planner import link_rates

    if kind not in ("server-bytes", "tokens"):  # the option's value: a usage error (a file's own kind: exit 3)
        raise UsageError(f"--kind must be server-bytes or tokens, got {kind!r}")
    B = load_traffic(traffic, TrafficSpec(kind=kind, tp=tp, gpus_per_server=gps, hidden=hidden, bytes_per_element=bpe))
    n = B.shape[-1]
    inv = hosts = lanes = None
    if inventory:
        from mfctl.fabric.mapping import region_lanes
        from mfctl.inventory import load_inventory

        inv = load_inventory(inventory)
        reg = next((r for r in inv.regions if r.name == region), None) if region else inv.regions[0]
        if reg is None:
            raise ConfigError(f"no region {region!r} in the inventory", path=inv.source)
        if len(reg.hosts) != n:
            raise ConfigError(f"the traffic matrix has {n} servers, region {reg.name} has {len(reg.hosts)}")
        hosts = list(reg.hosts)
        lanes = region_lanes(inv, hosts)
        ports_v = np.array([len(lanes[h]) for h in hosts])
        from mfctl.context import Context

        rates = Context(inv).link_rates(hosts[0])
    else:
        ports_v = np.full(n, ports)
        rates = link_rates(lane_gbps, eps_gbps)
    return B, ports_v, rates, hosts, lanes


MATRIX_MAX = 16  # servers: a wider circuit matrix does not fit a terminal; it is listed by pairs instead
PAIRS_MAX = 40


def _matrix_table(C, names, title):
    """The circuit matrix (up to :data:`MATRIX_MAX` servers), else the server pairs with circuits
    (the first :data:`PAIRS_MAX`; ``--json`` has them all)."""
    from rich.table import Table

    if len(names) <= MATRIX_MAX:
        t = Table("", *names, title=title)
        for i, row in enumerate(C):
            t.add_row(names[i], *[("·" if i == j else (str(v) if v else "-")) for j, v in enumerate(row)])
        return t
    pairs = [(names[i], names[j], int(C[i][j])) for i in range(len(names)) for j in range(i + 1, len(names)) if C[i][j]]
    more = len(pairs) - PAIRS_MAX
    t = Table("server", "server", "circuits", title=f"{title}: {len(pairs)} server pairs with circuits among {len(names)} "
                                                      "servers" + (f" (first {PAIRS_MAX}; --json for all)" if more > 0 else ""))
    for a, b, n in pairs[:PAIRS_MAX]:
        t.add_row(a, b, str(n))
    return t


@app.command("plan")
@handle_errors
def plan_cmd(traffic: Path = TRAFFIC_ARG, kind: str = KIND_OPT, inventory: Path = INV_OPT, region: str = REGION_OPT,
             ports: int = PORTS_OPT, lane_gbps: float = LANE_OPT, eps_gbps: float = EPS_OPT, tp: int = TP_OPT,
             gpus_per_server: int = GPS_OPT, hidden: int = HIDDEN_OPT, bytes_per_element: int = BPE_OPT,
             method: str = typer.Option("best", help="greedy (paper), exact, local, ilp, best."),
             current: Path = typer.Option(None, help="Current topology (circuit matrix file) for minimum-change planning."),
             tolerance: float = number_option(0.0, "--tolerance", min=0.0,
                                              help="Accept plans within this fraction of the best objective "
                                                   "if they change fewer circuits (with --current)."),
             json_out: bool = JSON_OPT):
    """Plan circuits for a traffic matrix: circuits, objective vs. the paper's greedy, lane and OCS-port mapping, routes."""
    from mfctl.errors import UsageError
    from mfctl.fabric import mapping
    from mfctl.fabric.matrixio import load_topology
    from mfctl.fabric.planner import METHODS, plan

    if method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}")
    B, ports_v, rates, hosts, lanes = _setup(traffic, kind, inventory, region, ports, lane_gbps, eps_gbps, tp,
                                             gpus_per_server, hidden, bytes_per_element)
    n = B.shape[-1]
    cur = load_topology(current, n) if current else None
    if cur is not None and (cur.sum(axis=1) > ports_v).any():
        from mfctl.errors import ConfigError
        raise ConfigError(f"the current topology uses more circuits than a server has OCS ports ({ports_v.tolist()})",
                          path=str(current))
    p = plan(B, ports_v, rates, method=method, current=cur, tolerance=tolerance)
    out = {"schema": "mfctl.topo.plan/v1", "servers": n, "layers": int(B.shape[0]), "ports": ports_v.tolist(), **p.to_dict()}
    names = hosts or [f"s{i}" for i in range(n)]
    if hosts:
        from mfctl.inventory import load_inventory

        inv = load_inventory(inventory)
        reg = next((r for r in inv.regions if r.name == region), None) if region else inv.regions[0]
        o = inv.region_ocs(reg) if reg is not None else None
        out["inventory"] = inv.name  # what `ocs apply` of this plan checks
        out["region"] = reg.name if reg is not None else None
        out["ocs"] = o.name if o is not None else None  # its ports are this switch's (numbered per OCS)
        circuits = mapping.map_circuits(p.circuits, hosts, lanes)
        out["lanes"] = [c.to_dict() for c in circuits]
        out["cross_connects"] = sorted([i, o] for i, o in mapping.cross_connect_map(circuits).items())
        out["routes"] = mapping.route_table(circuits, hosts)
    if json_out:
        emit_json(out)
        return
    con = out_console()
    con.print(_matrix_table(p.circuits, names, f"circuits ({p.method}, {p.elapsed_ms:.1f} ms)"))
    ratio = f"{p.objective_s / p.greedy_objective_s:.3f}x" if p.greedy_objective_s > 0 else "no traffic"
    con.print(f"estimated all-to-all time {_ms(p.objective_s)} — paper's greedy {_ms(p.greedy_objective_s)} "
              f"({ratio}), EPS only {_ms(p.eps_only_objective_s)}", highlight=False)
    if p.extra:
        con.print(f"minimum-change: {p.extra['changed_circuits']} circuit(s) change; best possible "
                  f"{_ms(p.extra['best_objective_s'])}, current {_ms(p.extra['current_objective_s'])}", highlight=False)
    if out.get("lanes") and out.get("ocs"):
        con.print(f"region {out['region']} on OCS {out['ocs']} (mfctl ocs apply PLAN.json -i INVENTORY --ocs {out['ocs']}):",
                  highlight=False)
    for c in out.get("lanes", []):
        con.print(f"  {c['a']} ↔ {c['b']}: cross-connects {c['cross_connects']}", highlight=False)


def _is_lane_topology(path: Path) -> bool:
    """``path`` is a topology of ports and lanes as ``mfctl ocs apply`` takes it (YAML, or JSON with
    ``cross_connects`` or ``circuits`` of lane pairs), not a circuit-matrix file."""
    import json

    if path.suffix.lower() in (".yaml", ".yml"):
        return True
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # the matrix loader says what is wrong with it
    circ = doc.get("circuits") if isinstance(doc, dict) else None
    return isinstance(doc, dict) and ("cross_connects" in doc or (
        isinstance(circ, list) and bool(circ) and all(isinstance(c, list) and all(isinstance(x, str) for x in c) for c in circ)))


def _topology_matrix(t: str, n: int, inventory, hosts, load_topology):
    """The ``[n, n]`` circuit matrix of topology file ``t``: a circuit-matrix file, or (with the
    inventory) one of ports and lanes as ``ocs apply`` takes it — one format from plan to apply."""
    import numpy as np

    from mfctl.errors import UsageError

    if not _is_lane_topology(Path(t)):
        return load_topology(t, n)
    if inventory is None:
        raise UsageError(f"{t} names OCS ports and lanes: give the inventory (-i) to count its circuits per server")
    from mfctl.fabric.mapping import circuits_from_cross_connects, region_lanes
    from mfctl.inventory import load_inventory
    from mfctl.ocs.service import PortMap, load_topology_file

    inv = load_inventory(inventory)
    on = inv.ocs_of_host(hosts[0]) if hosts else None  # the region's switch (ports are numbered per OCS)
    desired = load_topology_file(PortMap.from_inventory(inv, on.name if on is not None else None), t)
    idx = {h: i for i, h in enumerate(hosts)}
    C = np.zeros((n, n), dtype=int)
    for c in circuits_from_cross_connects(region_lanes(inv, hosts), desired):
        i, j = idx[c.a.host], idx[c.b.host]
        C[i, j] += 1
        C[j, i] += 1
    return C


@app.command("eval")
@handle_errors
def eval_cmd(traffic: Path = TRAFFIC_ARG, kind: str = KIND_OPT, inventory: Path = INV_OPT, region: str = REGION_OPT,
             ports: int = PORTS_OPT, lane_gbps: float = LANE_OPT, eps_gbps: float = EPS_OPT, tp: int = TP_OPT,
             gpus_per_server: int = GPS_OPT, hidden: int = HIDDEN_OPT, bytes_per_element: int = BPE_OPT,
             topology: list[str] = typer.Option(None, "--topology", "-t",
                                                help="greedy, best, eps-only, uniform, a circuit-matrix file, or "
                                                     "(with -i) a topology file as ocs apply takes it; repeat. "
                                                     "Default: all named ones."),
             json_out: bool = JSON_OPT):
    """Compare topologies on a traffic matrix by estimated all-to-all completion time (EPS fallback)."""
    import numpy as np
    from rich.table import Table

    from mfctl.fabric.matrixio import load_topology
    from mfctl.fabric.planner import greedy, objective, plan

    B, ports_v, rates, hosts, _ = _setup(traffic, kind, inventory, region, ports, lane_gbps, eps_gbps, tp,
                                         gpus_per_server, hidden, bytes_per_element)
    n = B.shape[-1]
    S = B.sum(axis=0)
    S = S + S.T
    np.fill_diagonal(S, 0)
    named = {"greedy": lambda: greedy(S, ports_v), "best": lambda: plan(B, ports_v, rates).circuits,
             "eps-only": lambda: np.zeros((n, n), dtype=int),
             "uniform": lambda: greedy(np.ones((n, n)) - np.eye(n), ports_v)}
    rows = []
    for t in topology or list(named):
        C = named[t]() if t in named else _topology_matrix(t, n, inventory, hosts, load_topology)
        if (C.sum(axis=1) > ports_v).any():
            from mfctl.errors import ConfigError
            raise ConfigError(f"topology {t} uses more circuits than a server has OCS ports ({ports_v.tolist()})")
        rows.append({"topology": t, "objective_s": float(objective(B, C, rates)[0]), "circuits": C.tolist(),
                     "circuit_count": int(C.sum() // 2)})
    best = min(r["objective_s"] for r in rows)
    for r in rows:
        r["ratio_to_best"] = r["objective_s"] / best if best > 0 else 1.0
    if json_out:
        emit_json({"schema": "mfctl.topo.eval/v1", "servers": n, "layers": int(B.shape[0]), "topologies": rows})
        return
    t = Table("topology", "circuits", "est. all-to-all ms", "vs best")
    for r in sorted(rows, key=lambda r: r["objective_s"]):
        t.add_row(r["topology"], str(r["circuit_count"]), _ms(r["objective_s"], unit=False), f"{r['ratio_to_best']:.3g}x")
    out_console().print(t)
