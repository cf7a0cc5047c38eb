"""Training-log parser on real logs (issue 19 item 3); values read off the files by hand."""

from __future__ import annotations

import json

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.trainlog import parse_train_log
from mfctl.metrics.imported import import_log
from support import DATA

LOGS = DATA / "train-logs"
MID_RUN = LOGS / "megatron-llm-mid-run-log-interval-1-cut-inside-field.txt"  # epfLLM/Megatron-LLM#11
SKIPPED = LOGS / "megatron-bert-all-skipped-first-interval-cut.txt"  # NVIDIA/nccl#743
NAN_TFLOPS = LOGS / "megatron-deepspeed-grad-norm-nan-tflops-mid-run.txt"  # bigscience Megatron-DeepSpeed#396
OVERFLOW = LOGS / "deepspeed-overflow-hysteresis-skipping-steps.txt"  # deepspeedai/DeepSpeed#931


def test_a_log_that_starts_mid_run_covers_only_its_own_iterations():
    tl = parse_train_log(MID_RUN.read_text())
    assert [r.iteration for r in tl.iterations] == [182, 183, 184, 185]
    assert [r.steps for r in tl.iterations] == [1, 1, 1, 1] and tl.log_interval == 1
    assert tl.first_iteration == 182 and tl.start_iteration is None  # an excerpt: where it began is unknown


def test_a_last_line_cut_inside_a_field_is_set_aside_not_read():
    tl = parse_train_log(MID_RUN.read_text())
    assert tl.cut_lines == [5]  # "... global batch size:  1024 | lm lo"
    assert tl.iterations[-1].elapsed_ms == 130554.9


def test_a_line_cut_inside_a_number_never_gives_a_partial_number():
    text = MID_RUN.read_text().splitlines()[0] + "\n" + \
        " iteration      183/  250000 | consumed samples:       187392 | elapsed time per iteration (ms): 12"
    tl = parse_train_log(text)  # the real line reads 125553.7: "12" is its first two digits
    assert [r.iteration for r in tl.iterations] == [182] and tl.cut_lines == [2]


def test_a_last_line_cut_before_its_elapsed_field_does_not_fail_the_log():
    text = MID_RUN.read_text().splitlines()[0] + "\n" + " iteration      183/  250000 | consumed samples:   "
    tl = parse_train_log(text)
    assert len(tl.iterations) == 1 and tl.cut_lines == [2]


def test_a_complete_line_without_elapsed_time_is_still_an_error():
    with pytest.raises(ParseError) as e:
        parse_train_log(" iteration 5/ 10 | lm loss: 1.0 |\n")
    assert (e.value.tool, e.value.line_no) == ("megatron log", 1)


def test_skipped_iterations_are_per_interval_and_summed_and_the_first_line_stands_for_its_interval():
    tl = parse_train_log(SKIPPED.read_text())
    [r] = tl.iterations  # iteration 20's line is cut at "number of skipp"
    assert (r.iteration, r.skipped, r.lm_loss, r.elapsed_ms) == (10, 10, None, 356.2)
    assert tl.start_iteration == 0 and r.steps == 10 and r.trained_steps == 0 and tl.cut_lines == [5]
    two = parse_train_log(SKIPPED.read_text() + " |\n")  # line 5 completed: skipped 10 + (none given)
    assert two.skipped_iterations == 10


def test_megatron_deepspeed_tflops_and_nan_fields():
    tl = parse_train_log(NAN_TFLOPS.read_text())
    assert [r.tflops_per_gpu for r in tl.iterations] == [78.36, 78.77, 78.71]  # "TFLOPs:" per GPU
    assert [r.consumed_tokens for r in tl.iterations] == [88899584, 88915968, 88932352]
    assert all(r.nonfinite == ["grad norm"] and "grad norm" not in r.extra for r in tl.iterations)
    assert tl.iterations[0].extra["actual seqlen"] == 2048 and tl.first_iteration == 5426


def test_durations_are_seconds_or_milliseconds_and_other_text_is_kept():
    # built to the documented shape of a Megatron line (no public log with an "1m 52s" value found)
    tl = parse_train_log(" iteration 10/ 100 | elapsed time per iteration (ms): 1m 52s | time to save: 2m 3.5s |"
                         " lm loss: nan | optimizer: adam |\n")
    [r] = tl.iterations
    assert r.elapsed_ms == 112000.0 and r.extra["time to save"] == 123.5
    assert r.lm_loss is None and r.nonfinite == ["lm loss"] and r.text == {"optimizer": "adam"}


def test_deepspeed_overflow_lines_are_skipped_steps():
    tl = parse_train_log(OVERFLOW.read_text())
    assert [(o.line_no, o.attempted_scale, o.new_scale) for o in tl.overflows] == [
        (2, 65536.0, None), (3, 65536.0, 32768.0), (4, 32768.0, 16384.0), (5, 16384.0, 8192.0)]
    assert tl.skipped_iterations == 4
    # the running count line as quoted in the same thread: "[Rank 0] step=10, skipped=6"
    tl2 = parse_train_log(OVERFLOW.read_text() + "[2023-04-28 06:52:00,000] [INFO] [logging.py:96:log_dist] "
                          "[Rank 0] step=10, skipped=6, lr=[0.0001]\n")
    assert tl2.deepspeed_steps == [(10, 6)] and tl2.skipped_iterations == 6


def test_import_of_a_mid_run_excerpt_counts_its_own_iterations_and_time(tmp_path):
    s = import_log(MID_RUN, tmp_path, seq_len=2048)
    assert s.iterations == 4 and s.logged_lines == 4  # was 185: iterations 1-182 extrapolated from line one
    assert s.simulated_train_s == pytest.approx((126995.3 + 125553.7 + 127804.5 + 130554.9) / 1000)
    assert "starts at iteration 182" in s.note and "line 5" in s.note


def test_import_counts_no_tokens_for_skipped_iterations(tmp_path):
    s = import_log(SKIPPED, tmp_path, seq_len=512)
    assert (s.iterations, s.skipped_iterations, s.tokens, s.tokens_per_s) == (10, 10, 0, 0.0)


def test_import_of_a_log_with_nan_fields_is_json(tmp_path):
    s = import_log(NAN_TFLOPS, tmp_path)
    text = json.dumps(s.to_dict(), allow_nan=False)  # no bare NaN anywhere
    assert s.tflops_per_gpu_mean == pytest.approx((78.36 + 78.77 + 78.71) / 3, abs=0.01)
    assert s.iterations == 3 and s.tokens == 16384 * 3 and '"tokens": 49152' in text


LINE = " iteration {it}/ {total} | elapsed time per iteration (ms): {ms} | global batch size: {gb} |\n"


@pytest.mark.parametrize("it,total,ms,gb,expected", [
    ("99999999999999999999999", "99999999999999999999999", "5", "8", "iteration numbers 'N/ M' from 1 to"),
    ("9223372036854775808", "10", "5", "8", "iteration numbers 'N/ M' from 1 to"),  # 2**63: one over int64
    ("0", "10", "5", "8", "iteration numbers 'N/ M' from 1 to"),
    ("1", "10", "-5", "8", "'elapsed time per iteration (ms)' of 0 or more"),
    ("1", "10", "5", "-8", "'global batch size' from 0 to"),
    ("1", "10", "5", "99999999999999999999999", "'global batch size' from 0 to"),
])
def test_an_iteration_line_out_of_range_is_an_error_naming_its_line(it, total, ms, gb, expected):
    text = LINE.format(it=1, total=10, ms=5, gb=8) + LINE.format(it=it, total=total, ms=ms, gb=gb)
    if it == "1":  # the second line must come after the first: put the bad values on line 1
        text = LINE.format(it=it, total=total, ms=ms, gb=gb)
    with pytest.raises(ParseError) as e:
        parse_train_log(text)
    assert e.value.tool == "megatron log" and e.value.line_no == (1 if it == "1" else 2)
    assert expected in e.value.expected


def test_the_largest_int64_iteration_number_is_read():
    [r] = parse_train_log(LINE.format(it=2**63 - 1, total=2**63 - 1, ms=5, gb=8)).iterations
    assert (r.iteration, r.total, r.elapsed_ms, r.global_batch) == (2**63 - 1, 2**63 - 1, 5, 8)


def test_import_of_an_out_of_range_line_writes_nothing_and_names_the_line(tmp_path):
    from mfctl.errors import ConfigError

    log = tmp_path / "big.log"
    log.write_text(LINE.format(it=1, total=10, ms=5, gb=8)
                   + LINE.format(it="99999999999999999999999", total="99999999999999999999999", ms=5, gb=8))
    with pytest.raises(ConfigError) as e:
        import_log(log, tmp_path / "runs")
    assert (e.value.path, e.value.line) == (str(log), 2) and "line 2: expected iteration numbers" in str(e.value)
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []
    huge_batch = tmp_path / "batch.log"  # each number in range, global batch x seq_len is not
    huge_batch.write_text(LINE.format(it=1, total=10, ms=5, gb=2**62))
    with pytest.raises(ConfigError) as e:
        import_log(huge_batch, tmp_path / "runs", seq_len=4)
    assert (e.value.path, e.value.line) == (str(huge_batch), 1) and "tokens per iteration" in str(e.value)
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_import_names_the_lines_whose_elapsed_time_is_not_a_finite_number(tmp_path):
    log = tmp_path / "nan.log"
    log.write_text("".join(LINE.format(it=i, total=10, ms=ms, gb=8)
                           for i, ms in ((1, 100), (2, "nan"), (3, "inf"), (4, "1e400"), (5, 300))))
    s = import_log(log, tmp_path / "runs", seq_len=2)
    assert s.logged_lines == 2 and s.iteration_time_s["min"] == 0.1 and s.iteration_time_s["max"] == 0.3
    assert s.extra["lines_not_counted"] == [2, 3, 4]
    assert "lines 2, 3, 4 not counted: elapsed time per iteration not a finite number" in s.note
    only_nan = tmp_path / "only-nan.log"
    only_nan.write_text(LINE.format(it=1, total=10, ms="nan", gb=8))
    from mfctl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"only-nan.log:1: no iteration line .*\(line 1: not a finite number\)"):
        import_log(only_nan, tmp_path / "runs2")
    assert not (tmp_path / "runs2").exists() or list((tmp_path / "runs2").iterdir()) == []
