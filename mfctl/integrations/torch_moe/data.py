"""The job's data: byte-level next-token prediction over three real texts (``corpus/PROVENANCE.md``).

Domains: ``prose`` (the Apache License 2.0), ``code`` (CPython's ``textwrap.py``), ``numbers``
(OLMoE router counts as JSON, shipped in ``mfctl/data/routing/olmoe/``). Each rank draws its own
sequences; the *mixture* of domains a rank draws changes every ``phase_iterations`` iterations —
a Dirichlet draw per (seed, phase, rank), as the simulated runtime mixes its routing traces by text
domain — so what the router sees, and hence the expert-parallel traffic, shifts during training
beside what the router itself learns. Tokens are bytes (vocabulary 256).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent / "corpus"
ROUTING = Path(__file__).resolve().parents[2] / "data" / "routing" / "olmoe"
DOMAINS = ("prose", "code", "numbers")
VOCAB = 256  # bytes


def _seed(*xs: int) -> int:
    """One generator seed from several integers (the same on every process and Python)."""
    h = 1469598103934665603
    for x in xs:
        h = ((h ^ (int(x) & 0xFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF  # FNV-1a over 32-bit words
    return h & 0x7FFFFFFFFFFFFFFF


@lru_cache(maxsize=1)
def texts() -> dict[str, bytes]:
    """Each domain's bytes. Raises FileNotFoundError naming a missing file."""
    numbers = b"\n".join(p.read_bytes() for p in sorted(ROUTING.glob("*.json")))
    if not numbers:
        raise FileNotFoundError(f"no routing JSON in {ROUTING} (the numbers domain)")
    return {"prose": (HERE / "apache-2.0.txt").read_bytes(), "code": (HERE / "textwrap.py.txt").read_bytes(),
            "numbers": numbers}


def mixture(seed: int, phase: int, rank: int, concentration: float = 0.3) -> list[float]:
    """The domain weights rank ``rank`` draws from in ``phase`` (sums to 1; Dirichlet(concentration):
    small values give one dominant domain)."""
    import torch

    g = torch.Generator().manual_seed(_seed(seed, phase, rank))
    gam = torch._standard_gamma(torch.full((len(DOMAINS),), float(concentration)), generator=g)
    w = gam / gam.sum() if float(gam.sum()) > 0 else torch.full((len(DOMAINS),), 1 / len(DOMAINS))
    return [float(x) for x in w]


class Batches:
    """Seeded batches ``(x, y)``: ``batch`` sequences of ``seq_len`` bytes and the next bytes
    (long tensors ``[batch, seq_len]``), for (rank, iteration, micro-batch). Deterministic: the same
    arguments give the same batch on any rank (a test rebuilds what a rank trained on)."""

    def __init__(self, *, batch: int, seq_len: int, seed: int = 1, phase_iterations: int = 10,
                 concentration: float = 0.3):
        import torch

        self.batch, self.seq_len, self.seed = batch, seq_len, seed
        self.phase_iterations, self.concentration = max(1, phase_iterations), concentration
        self.data = {d: torch.frombuffer(bytearray(t), dtype=torch.uint8).long() for d, t in texts().items()}
        short = [d for d, t in self.data.items() if len(t) <= seq_len + 1]
        if short:
            raise ValueError(f"seq_len {seq_len}: longer than the {', '.join(short)} text")

    def phase(self, iteration: int) -> int:
        return (iteration - 1) // self.phase_iterations

    def get(self, rank: int, iteration: int, micro: int = 0):
        import torch

        w = torch.tensor(mixture(self.seed, self.phase(iteration), rank, self.concentration))
        g = torch.Generator().manual_seed(_seed(self.seed, rank, iteration, micro, 1))
        doms = torch.multinomial(w, self.batch, replacement=True, generator=g)
        rows = []
        for d in doms.tolist():
            t = self.data[DOMAINS[d]]
            start = int(torch.randint(0, len(t) - self.seq_len - 1, (1,), generator=g))
            rows.append(t[start:start + self.seq_len + 1])
        seq = torch.stack(rows)
        return seq[:, :-1], seq[:, 1:]
