"""The controller checks a runtime's ``iteration`` and ``traffic`` messages at receipt
(:mod:`mfctl.runtime.messages`): figures a runtime may leave out (the Megatron hook sends no bytes)
make a summary all the same; figures that are not numbers are left out with one warning per host;
a message without what the run cannot do without fails the run saying which host sent what — never a
crash of the loop or of the summary at the run's end (the trial of issue 20: ``KeyError:
'inter_bytes'`` and an empty ``--json`` after a Megatron job trained to the end). A real Controller, a
real RuntimeClient over its socket, the real Training loop and MetricsStore."""

from types import SimpleNamespace

import pytest

from mfctl.metrics.store import MetricsStore
from mfctl.runtime import messages
from mfctl.runtime.protocol import ProtocolError
from support import DATA, PROTOTYPE


def _loop(tmp_path, send):
    """Run the real Training loop over what ``send(rt)`` sends as gpu01 (then bye); return the
    Training, its warnings and the summary of its record."""
    from mfctl.inventory import load_inventory
    from mfctl.ocs.journal import Journal
    from mfctl.runtime.client import RuntimeClient
    from mfctl.runtime.controller import Controller
    from mfctl.runtime.job import Observer
    from mfctl.runtime.plan import plan_run
    from mfctl.runtime.playbook import load_playbook
    from mfctl.runtime.summary import RunRecord, RunSummary
    from mfctl.runtime.training import Training

    plan = plan_run(load_playbook(DATA / "playbooks" / "short.yaml"), load_inventory(PROTOTYPE))
    plan.playbook.policy.enabled = False
    st = MetricsStore(tmp_path / "metrics.db")
    ctrl = Controller(token="tok", welcome=lambda h: {"run_id": "t", "iterations": 3}, expected_hosts={"gpu01"})
    warnings: list[str] = []
    tr = Training(plan, RunRecord(), ctrl=ctrl, launcher=SimpleNamespace(workers={}), driver=None, links=None, store=st,
                  journal=Journal(tmp_path / "journal.jsonl"), observer=Observer(), warn=warnings.append, scale=1.0,
                  log_dir=tmp_path)
    rt = RuntimeClient(ctrl.address_str, host="gpu01", token="tok")
    try:
        rt.connect()
        tr.wait_hellos(["gpu01"])
        send(rt)
        rt.bye(iterations=3)
        try:
            tr.loop({"gpu01"})
        except Exception as e:  # OperationFailed: the run fails (what the job then says)
            tr.raised = e
    finally:
        rt.close()
        ctrl.close()
        st.close()
    s = RunSummary.of_iterations(iterations=tr.record.rows(), reconfigurations=[], prediction_errors={},
                                 run_id="r", status="ok", playbook="p", inventory="i", run_dir="/tmp/r")
    return tr, warnings, s.to_dict()


def test_the_megatron_hooks_figures_make_a_summary(tmp_path):
    def send(rt):  # as MFabricHook.end_of_iteration sends them: no bytes, no a2a/compute split
        for it in (1, 2, 3):
            rt.iteration(it, seconds=0.5, tokens=4096, epoch=0, paused=False)

    tr, warnings, d = _loop(tmp_path, send)
    assert tr.failed is None and warnings == []
    assert d["iterations"] == 3 and d["tokens"] == 3 * 4096 and d["tokens_per_s"] == pytest.approx(4096 / 0.5)
    assert d["ep_inter_server_bytes"] == 0 and d["ep_share_on_circuits"] is None


def test_figures_that_are_not_numbers_are_left_out_with_one_warning(tmp_path):
    def send(rt):
        rt.iteration(1, seconds=0.5, tokens="lots", inter_bytes=float("nan"), ocs_bytes=-1, epoch=True)
        rt.iteration(2, seconds=0.5, tokens=10, inter_bytes="x")
        rt.iteration(3, seconds=0.5, tokens=10, inter_bytes=100.0, ocs_bytes=50.0)
        rt.traffic(3, [[[0, 1], [1, 0]]] * 2)  # the wrong shape for a 4-server region ... (but a leader's)

    tr, warnings, d = _loop(tmp_path, send)
    assert warnings == ["runtime on gpu01 sent iteration figures that are not numbers of their kind: tokens, epoch, "
                        "inter_bytes, ocs_bytes (left out; said once per host)"]
    assert d["tokens"] == 20 and d["ep_inter_server_bytes"] == 100.0 and d["ep_share_on_circuits"] == 0.5
    # ... is a bad message: the run fails naming it
    assert tr.failed == ("runtime on gpu01 sent a bad message: traffic message 3: 'matrices' has shape [2, 2, 2], "
                         "expected [layers >= 1, 4, 4] (the region's servers)")


@pytest.mark.parametrize("fields, said", [
    ({"seconds": 0.5}, "'iteration' must be a whole number >= 1, got 'None'"),
    ({"iteration": "3", "seconds": 0.5}, "'iteration' must be a whole number >= 1, got '3'"),
    ({"iteration": 1}, "iteration message 1: 'seconds' must be a number of seconds in (0, 86400], got 'None'"),
    ({"iteration": 1, "seconds": float("inf")}, "'seconds' must be a number of seconds"),
    ({"iteration": 1, "seconds": 0}, "'seconds' must be a number of seconds"),
])
def test_an_iteration_without_its_iteration_or_seconds_is_refused(fields, said):
    with pytest.raises(ProtocolError, match=None) as e:
        messages.iteration({"type": "iteration", **fields})
    assert said in str(e.value)


def test_a_bad_iteration_message_fails_the_run_naming_host_and_field(tmp_path):
    def send(rt):
        rt.iteration(1, seconds=0.5)
        rt._send({"type": "iteration", "iteration": 2, "seconds": "slow"})
        rt.traffic("x", [])  # (never reaches the loop's policy: the run has failed)

    tr, _, d = _loop(tmp_path, send)
    assert tr.failed == ("runtime on gpu01 sent a bad message: iteration message 2: 'seconds' must be a number of "
                         "seconds in (0, 86400], got 'slow'")
    assert d["iterations"] == 1


@pytest.mark.parametrize("matrices, said", [
    ("nope", "is not an array of numbers"), ([[[0, 1], [1]]], "is not an array of numbers"),
    ([], "has shape [0]"), ([[[0.0] * 4] * 4, [[-1.0] * 4] * 4], "negative or non-finite"),
])
def test_traffic_matrices_are_checked(matrices, said):
    with pytest.raises(ProtocolError) as e:
        messages.traffic_matrices({"type": "traffic", "iteration": 1, "matrices": matrices}, 4)
    assert said in str(e.value)
    assert messages.traffic_matrices({"iteration": 1, "matrices": [[[0.0] * 4] * 4]}, 4).shape == (1, 4, 4)
