"""``mfctl-gemm-bench`` (:mod:`mfctl.runtime.gemm_bench`): its command line and its output.

The tool prints one line per GEMM shape, ``M N K time_us TFLOP/s`` (a bf16 ``M×K @ K×N``,
time per GEMM in µs); :func:`parse_gemm` returns the shapes' FLOP counts and times."""

from __future__ import annotations

from dataclasses import dataclass

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

TOOL = "mfctl-gemm-bench"
LAYOUT = "'M N K time_us TFLOP/s'"


def gemm_argv(hidden: int, ffn_hidden: int) -> list[str]:
    """The tool's command line for the expert shapes of a model (hidden × ffn_hidden)."""
    return [TOOL, "--hidden", str(hidden), "--ffn", str(ffn_hidden)]


@dataclass(frozen=True)
class GemmRow:
    m: int
    n: int
    k: int
    time_s: float

    @property
    def flops(self) -> int:
        """2·M·N·K: one multiply and one add per term."""
        return 2 * self.m * self.n * self.k


@normalized
def parse_gemm(text: str) -> list[GemmRow]:
    """Every non-blank line as a :class:`GemmRow`. Raises ParseError (naming the line) for a line
    that is not ``M N K time_us …`` with whole M, N, K and a numeric time."""
    rows = []
    for no, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        try:
            m, n, k, us = words[:4]
            rows.append(GemmRow(int(m), int(n), int(k), float(us) * 1e-6))
        except ValueError:
            raise ParseError(TOOL, no, LAYOUT, line.strip()) from None
    return rows
