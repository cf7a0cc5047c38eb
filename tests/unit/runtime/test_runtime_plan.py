"""plan_run: a playbook fitted to an inventory, with no testbed (mfctl.runtime.plan)."""

import numpy as np
import pytest

from mfctl.errors import ConfigError
from mfctl.fabric import mapping
from mfctl.inventory import load_inventory
from mfctl.runtime.plan import initial_cross_connects, plan_run, random_regular
from mfctl.runtime.playbook import load_playbook
from support import PROTOTYPE, ROOT

MIXTRAL = ROOT / "playbooks" / "mixtral-prototype.yaml"


@pytest.fixture
def pb():
    return load_playbook(MIXTRAL)


@pytest.fixture
def inv():
    return load_inventory(PROTOTYPE)


def test_the_prototype_and_mixtral(pb, inv):
    p = plan_run(pb, inv)
    # 100 Gbit/s lanes and one 100G EPS NIC per server, at RoCEv2 goodput 0.92: 11.5 GB/s each way
    assert (p.rates.circuit_Bps, p.rates.eps_Bps) == (11.5e9, 11.5e9)
    assert p.gpus_per_server == 8 and p.trace.num_experts == 8
    # EP 8 x TP 4 on 8-GPU servers: two EP ranks per server, in order; one expert per rank
    assert p.rank_server.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert p.expert_rank.tolist() == list(range(8))
    assert list(p.regions) == ["region0"]
    reg = p.regions["region0"]
    assert reg.hosts == ["gpu01", "gpu02", "gpu03", "gpu04"] and reg.ports.tolist() == [3, 3, 3, 3]
    assert [(lane.netdev, lane.ocs_tx, lane.ocs_rx) for lane in reg.lanes["gpu01"]] == [
        ("ens1f0np0", 1, 385), ("ens2f0np0", 2, 386), ("ens3f0np0", 3, 387)]
    assert len(reg.ocs_ports) == 24 and {1, 385, 12, 396} <= reg.ocs_ports
    assert p.region_of("gpu03") is reg and reg.in_use == [] and p.crosslayer is not None


def test_the_prior_matrix_is_what_each_rank_sends_to_the_others(pb, inv):
    p = plan_run(pb, inv)
    B = p.prior_matrix(4)
    assert B.shape == (32, 4, 4)
    # seq 4096 x micro-batch 1 x top-2 tokens per rank, 4096 hidden x 2 bytes, to the 7 other ranks' experts
    sent = 4096 * 1 * 2 * 4096 * 2 * 7
    assert np.allclose(B.sum(axis=(1, 2)), sent)
    assert (B > 0).all()


@pytest.mark.parametrize("change, message", [
    (lambda pb: setattr(pb.parallelism, "ep", 4), "EP 4 x TP 4 = 16 GPUs, but region region0 has 4 x 8 GPUs"),
    (lambda pb: (setattr(pb.parallelism, "ep", 16), setattr(pb.parallelism, "tp", 2)),
     "8 experts of mistralai/Mixtral-8x7B-v0.1 do not divide over EP=16"),
    (lambda pb: setattr(pb.mock, "crash_host", "gpu09"), "mock.crash_host 'gpu09' is not in the inventory"),
    (lambda pb: (setattr(pb.runtime, "launcher", "slurm"), setattr(pb.runtime.slurm, "submit_host", "login1")),
     "runtime.slurm.submit_host 'login1' is not in the inventory"),
])
def test_a_playbook_that_does_not_fit_is_a_config_error_naming_the_playbook(pb, inv, change, message):
    change(pb)
    with pytest.raises(ConfigError) as e:
        plan_run(pb, inv)
    assert message in str(e.value) and str(MIXTRAL) in str(e.value)


def test_the_initial_topology_leaves_foreign_cross_connects_alone(pb, inv):
    p = plan_run(pb, inv)
    desired = initial_cross_connects(p, {200: 500, 1: 388})  # 200 → 500: no region's; 1 → 388: the region's, replaced
    reg = p.regions["region0"]
    C = mapping.circuit_matrix(reg.circuits, reg.hosts)
    assert C.tolist() == random_regular(reg.ports, np.random.default_rng([pb.training.seed, 99])).tolist()
    assert desired[200] == 500 and len(desired) == 1 + 2 * len(reg.circuits)  # two cross-connects per circuit
    assert desired == {200: 500, **mapping.cross_connect_map(reg.circuits)}
    assert (C.sum(axis=1) <= reg.ports).all() and (C == C.T).all()


def test_keep_takes_the_circuits_the_ocs_holds(pb, inv):
    pb.topology.initial = "keep"
    p = plan_run(pb, inv)
    reg = p.regions["region0"]
    first = plan_run(load_playbook(MIXTRAL), inv)
    held = initial_cross_connects(first, {})
    assert initial_cross_connects(p, held) == held
    assert mapping.circuit_matrix(reg.circuits, reg.hosts).tolist() == \
        mapping.circuit_matrix(first.regions["region0"].circuits, reg.hosts).tolist()


def test_random_regular_is_seeded_and_within_the_ports():
    ports = np.array([3, 3, 3, 3])
    a = random_regular(ports, np.random.default_rng([1, 99]))
    assert a.tolist() == [[0, 1, 0, 0], [1, 0, 1, 1], [0, 1, 0, 2], [0, 1, 2, 0]]
    assert a.tolist() == random_regular(ports, np.random.default_rng([1, 99])).tolist()
    assert (np.diag(a) == 0).all() and (a.sum(axis=1) <= 3).all()


def test_the_welcome_gives_the_circuits_in_use_and_the_testbeds_fields(pb, inv):
    p = plan_run(pb, inv)
    initial_cross_connects(p, {})
    reg = p.regions["region0"]
    down = {f"{reg.circuits[0].a.host}:{reg.circuits[0].a.netdev}"}
    reg.route_up(down)
    assert reg.routed == reg.circuits[1:]
    w = p.welcome("gpu02", run_id="r1", epoch=3, time_scale=20.0, crash_at_iteration=None)
    assert (w["region"], w["leader"], w["epoch"], w["time_scale"], w["gpus_per_server"]) == ("region0", "gpu01", 3, 20.0, 8)
    assert w["rates"] == {"circuit_Bps": 11.5e9, "eps_Bps": 11.5e9} and w["crash_at_iteration"] is None
    assert w["circuits"] == mapping.circuit_matrix(reg.circuits[1:], reg.hosts).tolist()
    assert list(w)[-1] == "crash_at_iteration" and w["parallelism"] == {"ep": 8, "tp": 4}


@pytest.mark.parametrize("old, new, field, message", [
    ("parallelism: {ep: 8, tp: 4}", "parallelism:\n  ep: 4\n  tp: 4", "  ep: 4",
     "EP 4 x TP 4 = 16 GPUs, but region region0 has 4 x 8 GPUs"),
    ("parallelism: {ep: 8, tp: 4}", "parallelism:\n  tp: 2\n  ep: 16", "  ep: 16",
     "8 experts of mistralai/Mixtral-8x7B-v0.1 do not divide over EP=16"),
    ("mock:\n", "mock:\n  crash_at_iteration: 3\n  crash_host: gpu09\n", "  crash_host: gpu09",
     "mock.crash_host 'gpu09' is not in the inventory"),
    ("training:\n", "training:\n  domains: [no-such-domain]\n", "  domains: [no-such-domain]", "has no domain(s)"),
])
def test_a_playbook_that_does_not_fit_names_the_line_of_the_field(tmp_path, inv, old, new, field, message):
    text = MIXTRAL.read_text().replace("../inventory/", str(ROOT / "inventory") + "/")
    assert old in text
    p = tmp_path / "pb.yaml"
    p.write_text(text.replace(old, new, 1))
    line = p.read_text().splitlines().index(field) + 1
    with pytest.raises(ConfigError) as e:
        plan_run(load_playbook(p), inv)
    assert (e.value.path, e.value.line) == (str(p), line) and message in str(e.value)
    assert str(e.value).startswith(f"{p}:{line}: ")


def test_a_tp_left_at_its_default_names_the_parallelism_line(tmp_path, inv):
    text = MIXTRAL.read_text().replace("../inventory/", str(ROOT / "inventory") + "/")
    p = tmp_path / "pb.yaml"
    p.write_text(text.replace("parallelism: {ep: 8, tp: 4}", "parallelism: {ep: 8}", 1))  # 8 x 1 GPUs, not 32
    line = p.read_text().splitlines().index("parallelism: {ep: 8}") + 1
    with pytest.raises(ConfigError, match=rf"^{p}:{line}: EP 8 x TP 1 = 8 GPUs"):
        plan_run(load_playbook(p), inv)
