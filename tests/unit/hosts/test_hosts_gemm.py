"""mfctl-gemm-bench's command line and output (mfctl.hosts.gemm)."""

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.gemm import gemm_argv, parse_gemm


def test_gemm_lines_become_flops_and_seconds():
    rows = parse_gemm("256 14336 4096 188.25 160.0\n\n512 14336 4096 370.1 162.7\n")
    assert [(r.m, r.n, r.k) for r in rows] == [(256, 14336, 4096), (512, 14336, 4096)]
    assert rows[0].flops == 2 * 256 * 14336 * 4096 and rows[0].time_s == pytest.approx(188.25e-6)
    assert gemm_argv(4096, 14336) == ["mfctl-gemm-bench", "--hidden", "4096", "--ffn", "14336"]


@pytest.mark.parametrize("text, line", [("256 14336 4096\n", 1), ("256 14336 4096 1.0 2\nno cuda\n", 2),
                                        ("256.5 14336 4096 1.0 2\n", 1)])
def test_anything_else_is_a_parse_error_naming_the_line(text, line):
    with pytest.raises(ParseError) as e:
        parse_gemm(text)
    assert e.value.line_no == line and "'M N K time_us TFLOP/s'" in str(e.value)
