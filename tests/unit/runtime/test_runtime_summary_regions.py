"""A run of several regions: its iteration is every region's — as long as the slowest region, the
regions' tokens and bytes summed, paused if any was — and no per-epoch figure mixes the regions' own
epochs (the trial of issue 22 saw one region's figures, or epochs 0, 1, 5, 8 of four regions mixed)."""

from mfctl.runtime.summary import RunRecord, RunSummary

RUN = {"run_id": "r", "status": "ok", "playbook": "p", "inventory": "i", "run_dir": "/tmp/r"}


def _msg(it, seconds, tokens, epoch, paused=False):
    return {"type": "iteration", "iteration": it, "seconds": seconds, "tokens": tokens, "epoch": epoch,
            "paused": paused, "inter_bytes": 10.0, "ocs_bytes": 4.0, "a2a_s": seconds / 4}


def test_the_jobs_iteration_is_the_slowest_region_with_the_regions_sums():
    rec = RunRecord()
    rec.add_iteration("region0", _msg(1, 2.0, 100, 0))
    assert rec.rows()[0]["seconds"] == 2.0 and rec.rows()[0]["tokens"] == 100 and "regions" not in rec.rows()[0]
    rec.add_iteration("region1", _msg(1, 3.0, 100, 5, paused=True))
    rec.add_iteration("region0", _msg(2, 2.5, 100, 1))
    rec.add_iteration("region1", _msg(2, 1.5, 100, 5))
    rec.add_iteration("region1", _msg(2, 1.5, 100, 5))  # (the same region twice counts once)
    one, two = rec.rows()
    assert (one["seconds"], one["tokens"], one["inter_bytes"], one["ocs_bytes"], one["paused"], one["regions"]) == \
        (3.0, 200, 20.0, 8.0, True, 2)
    assert (two["seconds"], two["tokens"], two["epoch"], two["paused"], two["regions"]) == (2.5, 200, 1, False, 2)
    d = RunSummary.of_iterations(iterations=rec.rows(), reconfigurations=[], prediction_errors={}, **RUN).to_dict()
    assert d["iterations"] == 2 and d["tokens"] == 400 and d["simulated_train_s"] == 5.5
    assert d["iteration_time_by_epoch_s"] == {}  # each region has epochs of its own


def test_one_region_keeps_its_messages_and_epochs():
    rec = RunRecord()
    for it, (s, e) in enumerate([(2.0, 0), (1.0, 1), (1.5, 1)], 1):
        rec.add_iteration("region0", _msg(it, s, 10, e))
    d = RunSummary.of_iterations(iterations=rec.rows(), reconfigurations=[], prediction_errors={}, **RUN).to_dict()
    assert d["iteration_time_by_epoch_s"] == {"0": 2.0, "1": 1.25} and d["tokens"] == 30
