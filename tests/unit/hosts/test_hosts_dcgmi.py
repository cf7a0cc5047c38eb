"""``dcgmi diag`` on real DCGM 3.x per-GPU rows (issue 19 item 1): values read off the capture
by hand (``tests/data/dcgm/diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt``, NVIDIA/go-dcgm#52)."""

from __future__ import annotations

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.dcgmi import parse_diag, status_of
from support import DATA

GO_DCGM_52 = (DATA / "dcgm" / "diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt").read_text()


def test_a_pass_row_whose_continuation_fails_gpu0_is_a_gpu0_failure():
    r = parse_diag(GO_DCGM_52)
    assert r.per_gpu["GPU Memory"] == {1: "Pass", 0: "Fail"}  # "Pass - GPU: 1" then "Fail - GPU: 0"
    assert r.status["GPU Memory"] == {"0": "fail", "1": "pass"}
    assert "GPU Memory (GPU 0)" in r.failed and "GPU Memory (GPU 1)" not in r.failed


def test_a_test_named_diagnostic_is_a_test_not_the_header():
    r = parse_diag(GO_DCGM_52)
    assert r.tests["Diagnostic"] == "Fail - All" and r.sections["Diagnostic"] == "Hardware"
    assert r.failed == ["GPU Memory (GPU 0)", "Diagnostic", "Targeted Stress"]


def test_every_warning_is_kept_under_its_test_and_wrapped_words_are_rejoined():
    r = parse_diag(GO_DCGM_52)
    assert r.warnings["GPU Memory"] == [
        "GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable device(s) is/are busy or unavailable'."]
    assert r.warnings["Diagnostic"] == [
        "GPU 0 API call cuMemGetInfo failed: 'context is destroyed' Check DCGM and system logs for errors. "
        "Reset GPU. Restart DCGM. Rerun diagnostics."]
    assert r.info["GPU Memory"] == ["GPU 1 Allocated 15568304202 bytes (98.3%)"]


def test_two_warning_rows_under_one_test_are_two_warnings():
    text = ("+---------------------------+------------------------------------------------+\n"
            "| Diagnostic                | Result                                         |\n"
            "+-----  Stress  ------------+------------------------------------------------+\n"
            "| Targeted Power            | Warn - All                                     |\n"
            "| Warning                   | GPU 0 first                                    |\n"
            "| Warning                   | GPU 1 second                                   |\n")
    r = parse_diag(text)
    assert r.warnings == {"Targeted Power": ["GPU 0 first", "GPU 1 second"]}
    assert r.status == {"Targeted Power": {"all": "warn"}} and r.failed == []


def test_status_words():
    assert [status_of(x) for x in ("Pass - All", "Fail - GPU: 0", "Skip", "Warn", "Error", "", "maybe")] == [
        "pass", "fail", "skip", "warn", "fail", None, None]


def test_a_warning_before_any_test_is_a_parse_error_naming_its_line():
    with pytest.raises(ParseError) as e:
        parse_diag("+-----  Hardware  ---+----+\n| Warning | GPU 0 alone |\n")
    assert e.value.tool == "dcgmi diag" and e.value.line_no == 2


def test_a_warning_in_the_result_column_is_a_warning():
    # built to the DCGM 4.x layout of the real 4.2.3 capture (NVIDIA/DCGM#253), whose warnings the excerpt cut off
    text = (DATA / "dcgm" / "diag-dcgm423-new-layout-per-gpu-truncated.txt").read_text().rstrip("\n") + (
        "                                           |\n"
        "|                           | GPU0: Warn                                     |\n"
        "|                           | Warning: GPU0 Persistence mode for GPU 0 is    |\n"
        "|                           | disabled.                                      |\n")
    r = parse_diag(text)
    assert r.per_gpu["memory"] == {0: "Warn"} and r.warnings == {"memory": ["GPU0 Persistence mode for GPU 0 is disabled."]}
    assert r.status["memory"] == {"0": "warn"} and r.failed == []
