"""dcgm-exporter metrics text (Prometheus exposition format, parsed with prometheus-client).

DCGM reports "no data" with sentinels, not with absent samples: int64 values at or above
``DCGM_INT64_BLANK`` (0x7ffffffffffffff0) and float values at or above ``DCGM_FP64_BLANK``
(140737488355328.0) are blank (dcgm_structs.h). They become ``None``, never a number.
Lines that are only ``...`` (elisions in excerpts) are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0


@dataclass
class DcgmSample:
    metric: str
    gpu: str | None
    labels: dict[str, str]
    value: float | None  # None: a DCGM blank sentinel


def _blank(v: float) -> bool:
    return v >= DCGM_FP64_BLANK or v >= float(DCGM_INT64_BLANK)


@normalized
def parse_exporter(text: str) -> list[DcgmSample]:
    from prometheus_client.parser import text_string_to_metric_families

    out: list[DcgmSample] = []
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#") or s == "...":
            continue
        try:
            fams = list(text_string_to_metric_families(s + "\n"))
        except (ValueError, IndexError) as e:
            raise ParseError("dcgm-exporter", no, "'METRIC{labels} value'", s) from e
        for fam in fams:
            for smp in fam.samples:
                out.append(DcgmSample(smp.name, smp.labels.get("gpu"), dict(smp.labels),
                                      None if _blank(smp.value) else smp.value))
    if not out:
        raise ParseError("dcgm-exporter", None, "at least one sample", text.strip()[:80])
    return out
