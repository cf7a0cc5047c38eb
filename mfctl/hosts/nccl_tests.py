"""nccl-tests result tables (``all_reduce_perf``, ``alltoall_perf``, …).

Handles the layouts seen in the corpus: srun labels (``0: ``), mpirun tags
(``[1,0]<stdout>:``), the new header (``redop root … #wrong``) and the old one (``redop …
error``, sometimes with an empty redop column), ``N/A`` values (missing data, never a
number), integer times, a missing ``Avg bus bandwidth`` footer, and NCCL ``WARN`` lines
interleaved with the table. Rows are parsed from the right: the last eight fields are
out-of-place and in-place ``time algbw busbw wrong``.

Only the main process prints the ``# nThread … nGpus …`` header: a header printed more than once
means each launched process ran its own one-process test (a binary built without ``MPI=1`` under
mpirun/srun; NVIDIA/nccl-tests#109) — its rows are per process, not the job's, and it is refused
as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")
_WARN = re.compile(r"NCCL WARN (.*)$")
_HEADER = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+\d+")


def perf_argv(test: str, min_bytes: str = "1K", max_bytes: str = "256M", factor: int = 2, gpus: int = 8,
              nodes: int | None = None) -> list[str]:
    """nccl-tests command line; ``nodes`` runs it across that many hosts (``-n``: the launcher's
    world size — mpirun/srun wrap it on real clusters)."""
    if test not in ("all_reduce_perf", "alltoall_perf", "all_gather_perf", "reduce_scatter_perf"):
        raise ValueError(f"unknown nccl-tests binary {test!r}")
    argv = [test, "-b", min_bytes, "-e", max_bytes, "-f", str(factor), "-g", str(gpus)]
    return argv + (["-n", str(nodes)] if nodes else [])


@dataclass
class PerfRow:
    size_bytes: int
    count: int
    dtype: str
    time_us: float | None  # out-of-place
    algbw_gbs: float | None
    busbw_gbs: float | None
    ip_time_us: float | None  # in-place
    ip_busbw_gbs: float | None


@dataclass
class PerfResult:
    rows: list[PerfRow] = field(default_factory=list)
    avg_busbw_gbs: float | None = None
    warnings: list[str] = field(default_factory=list)


def _f(x: str) -> float | None:
    if x in ("N/A", "nan", "-nan", "inf"):
        return None
    return float(x)


@normalized
def parse_perf(text: str) -> PerfResult:
    """Parse a nccl-tests output. Raises ParseError when there is no result row, or when the
    header is repeated (processes that ran alone: see the module docstring)."""
    res = PerfResult()
    headers: list[int] = []
    for no, raw in enumerate(text.splitlines(), 1):
        ln = _PREFIX.sub("", raw).rstrip()
        if _HEADER.match(ln):
            headers.append(no)
            if len(headers) == 2:
                raise ParseError("nccl-tests", no, "one '# nThread … nGpus …' header (printed again at line "
                                 f"{no} after line {headers[0]}: each process ran alone — a binary built without "
                                 "MPI=1 launched once per rank; rebuild with 'make MPI=1')", ln.strip())
        w = _WARN.search(ln)
        if w:
            res.warnings.append(w.group(1).strip())
            continue
        m = re.match(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)", ln)
        if m:
            res.avg_busbw_gbs = _f(m.group(1))
            continue
        s = ln.strip()
        if not s or s.startswith("#") or not s[0].isdigit():
            continue
        parts = s.split()
        if len(parts) < 11 or not parts[0].isdigit() or not parts[1].isdigit():
            continue  # a rank list line or similar
        try:
            t, a, b, _w, it, _ia, ib, _iw = parts[-8:]
            res.rows.append(PerfRow(int(parts[0]), int(parts[1]), parts[2], _f(t), _f(a), _f(b), _f(it), _f(ib)))
        except ValueError:
            raise ParseError("nccl-tests", no, "size count type [redop] [root] then 2 x (time algbw busbw wrong)", s) from None
    if not res.rows:
        raise ParseError("nccl-tests", None, "at least one result row (the test may have failed: "
                         + ("; ".join(res.warnings[:2]) or "no NCCL WARN line") + ")")
    return res
