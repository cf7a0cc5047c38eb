"""What a run needs to know before anything starts: :func:`plan_run` (pure, no testbed).

A :class:`RunPlan` joins a playbook and an inventory: the routing trace, the link rates, the
EP-rank → server and expert → EP-rank maps, each region's hosts and optical lanes — and refuses a
pair that does not fit (EP × TP ≠ a region's GPUs, experts that do not divide over EP, a named
host missing) with a :class:`~mfctl.errors.ConfigError`, exit 3, before a mock, a lock or a
file exists. The initial topology (:func:`initial_cross_connects`) is pure too: it is computed
from what the OCS holds, the caller applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mfctl.context import Context
from mfctl.errors import ConfigError
from mfctl.fabric import mapping
from mfctl.fabric.planner import LinkRates
from mfctl.fabric.planner import plan as plan_circuits
from mfctl.fabric.predict import CrossLayerModel
from mfctl.fabric.traffic import RoutingTrace, expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix
from mfctl.runtime.playbook import TORCH_MOE_JOB, Playbook, line_of


@dataclass
class RegionState:
    """One region (one EP group) during a run: its hosts (the matrices' order), OCS lanes per
    host and ``ports`` (lanes per host, the planner's degree bound), the ``ocs`` they are on
    (its ports are that switch's); then what the run learns:
    the circuits on the OCS, those carrying traffic, the latest prediction (dispatch bytes
    ``[L, n, n]``), the predictors, the last reconfiguration's iteration, the last iteration's
    time (testbed s)."""

    name: str
    hosts: list[str]
    ports: np.ndarray
    lanes: dict[str, list[mapping.LaneRef]]
    ocs: str = ""  #: the OCS its lanes reach (inventory ``regions[].ocs``, else the only one), by name
    circuits: list[mapping.Circuit] = field(default_factory=list)  # on the OCS
    routed: list[mapping.Circuit] | None = None  # of those, the ones carrying traffic (lanes up); None: all
    predicted: np.ndarray | None = None  # the policy's prediction of per-layer dispatch bytes [L, n, n]
    predictors: dict = field(default_factory=dict)
    last_reconfig_iter: int = 0
    last_iter_s: float | None = None

    @property
    def ocs_ports(self) -> set[int]:
        """The OCS ports of the region's lanes (both directions)."""
        return {p for ls in self.lanes.values() for lane in ls for p in (lane.ocs_tx, lane.ocs_rx)}

    def route_up(self, down: set[str]) -> None:
        """Route over the circuits whose lanes (``host:netdev``) are not ``down``."""
        self.routed = [c for c in self.circuits if not {f"{c.a.host}:{c.a.netdev}", f"{c.b.host}:{c.b.netdev}"} & down]

    @property
    def in_use(self) -> list[mapping.Circuit]:
        """The circuits carrying traffic (all of them until a link poll says otherwise)."""
        return self.circuits if self.routed is None else self.routed


@dataclass
class RunPlan:
    """A playbook fitted to an inventory. ``rates`` bytes/s per direction (RoCEv2 goodput,
    :func:`mfctl.fabric.planner.link_rates`); ``expert_rank[e]`` the EP rank of expert ``e``;
    ``rank_server[r]`` the server index (in region order) of EP rank ``r``; ``crosslayer`` the
    cross-layer predictor when the trace has one."""

    playbook: Playbook
    trace: RoutingTrace
    rates: LinkRates
    gpus_per_server: int
    expert_rank: np.ndarray
    rank_server: np.ndarray
    crosslayer: CrossLayerModel | None
    regions: dict[str, RegionState]
    #: the run's open OCS drivers by OCS name (set by the job once it has opened them; empty before)
    drivers: dict[str, Any] = field(default_factory=dict)

    def region_of(self, host: str) -> RegionState:
        return next(r for r in self.regions.values() if host in r.hosts)

    @property
    def ocs_names(self) -> list[str]:
        """The OCSes the regions reach, in region order, each once."""
        return list(dict.fromkeys(r.ocs for r in self.regions.values()))

    def regions_on(self, ocs: str) -> list[RegionState]:
        """The regions whose lanes reach the OCS named ``ocs``."""
        return [r for r in self.regions.values() if r.ocs == ocs]

    def driver_for(self, region: RegionState | str):
        """The open driver of the OCS ``region`` (a RegionState or its name) reaches. KeyError
        before the job opened it."""
        reg = self.regions[region] if isinstance(region, str) else region
        return self.drivers[reg.ocs]

    def prior_matrix(self, n: int) -> np.ndarray:
        """Expected dispatch bytes ``[layers, n, n]`` from the trace's mean routing (before any
        traffic is seen)."""
        pb, trace = self.playbook, self.trace
        p = trace.probs.mean(axis=0)  # [trace layer, expert]
        tokens_per_rank = pb.training.seq_len * pb.training.micro_batch * trace.top_k
        mats = []
        for layer in range(pb.model.layers):
            t = np.tile(p[trace.trace_layer_for(layer)] * tokens_per_rank, (pb.parallelism.ep, 1))
            mats.append(server_matrix(rank_matrix(t, self.expert_rank, pb.parallelism.ep), self.rank_server, n,
                                      pb.model.hidden * pb.model.bytes_per_element))
        return np.stack(mats)

    def welcome(self, host: str, *, run_id: str, epoch: int, time_scale: float, **extra) -> dict:
        """``host``'s ``welcome`` (docs/runtime-protocol.md): its region, the run's figures, the
        circuits in use and their routes (pairs whose lanes are down go over the EPS); ``extra``
        the testbed's fields."""
        pb, reg = self.playbook, self.region_of(host)
        routed = reg.in_use
        return {"run_id": run_id, "region": reg.name, "hosts": reg.hosts, "leader": reg.hosts[0],
                "iterations": pb.training.iterations, "time_scale": time_scale, "epoch": epoch,
                "model": pb.model.model_dump(), "parallelism": pb.parallelism.model_dump(),
                "training": pb.training.model_dump(), "gpus_per_server": self.gpus_per_server,
                "rates": {"circuit_Bps": self.rates.circuit_Bps, "eps_Bps": float(self.rates.eps_Bps)},
                "circuits": mapping.circuit_matrix(routed, reg.hosts).tolist(),
                "routes": mapping.route_table(routed, reg.hosts), **extra}

    def server_tokens(self, tokens: np.ndarray, n: int) -> np.ndarray:
        """EP-rank × expert token counts folded to server × server (for the cross-layer score)."""
        return server_matrix(rank_matrix(tokens, self.expert_rank, self.playbook.parallelism.ep), self.rank_server, n, 1.0)


def plan_run(pb: Playbook, inv) -> RunPlan:
    """Fit ``pb`` to the inventory ``inv`` (:class:`mfctl.inventory.models.Inventory`). Pure: reads
    the routing trace shipped with mfctl, nothing else. Raises ConfigError (the file named)."""
    try:
        trace = load_routing(pb.model.routing, pb.training.domains)
    except ValueError as e:
        where = ("training", "domains") if pb.training.domains and "domain" in str(e) else ("model", "routing")
        raise ConfigError(str(e), path=pb.source, line=line_of(pb, *where)) from None
    gps = _check_fit(pb, inv, trace)
    try:
        crosslayer = CrossLayerModel.load(pb.model.routing, pb.training.domains)
    except ValueError:
        crosslayer = None
    regions = {}
    for r in inv.regions:
        lanes = mapping.region_lanes(inv, r.hosts)
        o = inv.region_ocs(r)  # (the loader's cross-checks made sure there is one)
        regions[r.name] = RegionState(r.name, list(r.hosts), np.array([len(lanes[h]) for h in r.hosts]), lanes,
                                      ocs=o.name if o is not None else "")
    ep, tp = pb.parallelism.ep, pb.parallelism.tp
    return RunPlan(playbook=pb, trace=trace, rates=Context(inv).link_rates(), gpus_per_server=gps,
                   expert_rank=expert_to_rank(trace.num_experts, ep), rank_server=rank_to_server(ep, tp, gps),
                   crosslayer=crosslayer, regions=regions)


def _check_fit(pb: Playbook, inv, trace: RoutingTrace) -> int:
    """GPUs per server, once the playbook's parallelism, experts and named hosts fit the inventory."""
    gps = inv.hosts[0].gpus.count
    if any(h.gpus.count != gps for h in inv.hosts):
        raise ConfigError("hosts have different GPU counts; the simulated runtime needs them equal", path=inv.source)
    ep, tp = pb.parallelism.ep, pb.parallelism.tp
    for r in inv.regions:
        if ep * tp != len(r.hosts) * gps:
            raise ConfigError(f"EP {ep} x TP {tp} = {ep * tp} GPUs, but region {r.name} has "
                              f"{len(r.hosts)} x {gps} GPUs (a region is one EP group)", path=pb.source,
                              line=line_of(pb, "parallelism", "ep"))
    if trace.num_experts % ep:
        raise ConfigError(f"{trace.num_experts} experts of {trace.model} do not divide over EP={ep}", path=pb.source,
                          line=line_of(pb, "parallelism", "ep"))
    names = {h.name for h in inv.hosts}
    if pb.mock.crash_host and pb.mock.crash_host not in names:
        raise ConfigError(f"mock.crash_host {pb.mock.crash_host!r} is not in the inventory", path=pb.source,
                          line=line_of(pb, "mock", "crash_host"))
    sh = pb.runtime.slurm.submit_host
    if pb.runtime.launcher == "slurm" and sh and sh not in names | {lh.name for lh in inv.login_hosts}:
        raise ConfigError(f"runtime.slurm.submit_host {sh!r} is not in the inventory (neither a host nor one of "
                          "its login_hosts)", path=pb.source, line=line_of(pb, "runtime", "slurm", "submit_host"))
    rt = pb.runtime
    if rt.launcher in ("ssh", "slurm") and rt.script == TORCH_MOE_JOB and rt.script_mode == "module":
        from mfctl.integrations.torch_moe.options import OptionsError, parse

        try:
            opt = parse(rt.script_args)
        except OptionsError:
            pass  # (the playbook's own check said it at load)
        else:
            world = len(inv.hosts) * rt.nproc_per_node  # torchrun's ranks: every host x nproc_per_node
            if opt.experts % world:
                raise ConfigError(f"{TORCH_MOE_JOB}: --experts {opt.experts} do not divide over its {world} EP ranks "
                                  f"({len(inv.hosts)} hosts x nproc_per_node {rt.nproc_per_node})", path=pb.source,
                                  line=line_of(pb, "runtime", "script_args"))
    return gps


def initial_cross_connects(plan: RunPlan, current: dict[int, int], ocs: str | None = None) -> dict[int, int]:
    """The whole OCS named ``ocs`` (``{input: output}``; None: every region's, for an inventory
    with one OCS) for the playbook's ``topology.initial`` — ``keep`` what ``current`` (that OCS's
    cross-connects) holds, ``random`` (seeded by ``training.seed``), or planned for the trace's
    prior traffic — and each of its regions' ``circuits`` set to it. Cross-connects on ports
    outside its regions are left as they are."""
    pb = plan.playbook
    desired: dict[int, int] = {}
    region_ports: set[int] = set()
    for reg in (plan.regions.values() if ocs is None else plan.regions_on(ocs)):
        region_ports |= reg.ocs_ports
        prev = mapping.circuits_from_cross_connects(reg.lanes, current)
        if pb.topology.initial == "keep":
            reg.circuits = prev
        else:
            if pb.topology.initial == "random":
                C = random_regular(reg.ports, np.random.default_rng([pb.training.seed, 99]))
            else:
                C = plan_circuits(plan.prior_matrix(len(reg.hosts)), reg.ports, plan.rates,
                                  method=pb.topology.planner).circuits
            reg.circuits = mapping.map_circuits(C, reg.hosts, reg.lanes, prev)
        desired.update(mapping.cross_connect_map(reg.circuits))
    desired.update({i: o for i, o in current.items() if i not in region_ports and o not in region_ports})
    return desired


def random_regular(ports: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random multigraph using every port it can (the MixNet simulator's random_connect())."""
    n = len(ports)
    C = np.zeros((n, n), dtype=int)
    avail = np.array(ports, dtype=int)
    for _ in range(int(avail.sum())):
        cand = [(i, j) for i in range(n) for j in range(i + 1, n) if avail[i] > 0 and avail[j] > 0]
        if not cand:
            break
        i, j = cand[rng.integers(len(cand))]
        C[i, j] += 1
        C[j, i] += 1
        avail[i] -= 1
        avail[j] -= 1
    return C
