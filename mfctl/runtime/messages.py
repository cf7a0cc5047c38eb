"""What the controller takes from a runtime's ``iteration`` and ``traffic`` messages (protocol v1,
docs/runtime-protocol.md), checked at receipt: a runtime is a program someone else wrote (a
Megatron hook, a plain-torch job, a hostile peer with the run's token), so nothing it sends may
crash the controller's loop or its summary at the run's end.

- A field the controller cannot do without (``iteration``, ``seconds``; ``matrices`` of a
  ``traffic``) that is missing or wrong is a :class:`~mfctl.runtime.protocol.ProtocolError`
  naming the field and what was expected: the run fails with it, saying which host sent it.
- An optional figure (``tokens``, ``epoch``, ``a2a_s``, ``compute_s``, ``inter_bytes``,
  ``ocs_bytes``) that is missing is None, and one that is not a finite non-negative number is
  dropped the same way (:func:`iteration` returns the names it dropped, for one warning).
"""

from __future__ import annotations

import math

import numpy as np

from mfctl.runtime.protocol import ProtocolError

#: the ``iteration`` message's optional figures and their kinds (int: a count; float: s or bytes)
OPTIONAL_FIGURES = {"tokens": int, "epoch": int, "a2a_s": float, "compute_s": float, "inter_bytes": float,
                    "ocs_bytes": float}
#: s: an iteration longer than a day is not a report of one
MAX_ITERATION_S = 86400.0


def is_count(v) -> bool:
    """``v`` is a whole number in [0, 2**63) (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _figure(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, int) and v >= 2**63)
            and math.isfinite(v) and v >= 0)


def iteration(msg: dict) -> tuple[dict, list[str]]:
    """The ``iteration`` message with its figures checked: ``iteration`` a count ≥ 1 and
    ``seconds`` a finite number in (0, :data:`MAX_ITERATION_S`] (else ProtocolError), each of
    :data:`OPTIONAL_FIGURES` its kind or None, ``paused`` a bool. Returns the message and the
    names of the optional figures that were there but not numbers of their kind (set None)."""
    it, secs = msg.get("iteration"), msg.get("seconds")
    if not is_count(it) or it < 1:
        raise ProtocolError(f"iteration message: 'iteration' must be a whole number >= 1, got {str(it)[:40]!r}")
    if not _figure(secs) or not 0 < secs <= MAX_ITERATION_S:
        raise ProtocolError(f"iteration message {it}: 'seconds' must be a number of seconds in (0, "
                            f"{MAX_ITERATION_S:g}], got {str(secs)[:40]!r}")
    out, dropped = dict(msg), []
    for name, kind in OPTIONAL_FIGURES.items():
        v = msg.get(name)
        ok = is_count(v) if kind is int else _figure(v)
        if v is not None and not ok:
            dropped.append(name)
        out[name] = (int(v) if kind is int else float(v)) if v is not None and ok else None
    out["paused"] = msg.get("paused") is True
    return out, dropped


def traffic_matrices(msg: dict, servers: int) -> np.ndarray:
    """A ``traffic`` message's ``matrices`` as an array ``[layer, servers, servers]`` of finite
    bytes ≥ 0 (at least one layer), and its ``iteration`` a count ≥ 1; else ProtocolError."""
    it = msg.get("iteration")
    if not is_count(it) or it < 1:
        raise ProtocolError(f"traffic message: 'iteration' must be a whole number >= 1, got {str(it)[:40]!r}")
    try:
        B = np.asarray(msg.get("matrices"), dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ProtocolError(f"traffic message {it}: 'matrices' is not an array of numbers "
                            f"[layer][{servers}][{servers}]") from None
    if B.ndim != 3 or B.shape[0] < 1 or B.shape[1:] != (servers, servers):
        raise ProtocolError(f"traffic message {it}: 'matrices' has shape {list(B.shape)}, expected "
                            f"[layers >= 1, {servers}, {servers}] (the region's servers)")
    if not np.isfinite(B).all() or (B < 0).any():
        raise ProtocolError(f"traffic message {it}: 'matrices' holds a negative or non-finite byte count")
    return B
