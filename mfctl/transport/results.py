"""Per-host results of one fan-out, and the observer every long operation reports to.

One mechanism for every command that works on many hosts (``mfctl exec``, ``health``,
``provision``, ``run``): :meth:`mfctl.transport.ssh.SSHPool.map` runs a function per host and
returns :class:`Results`; :meth:`Results.exit_code` is the one place where per-host outcomes
become the exit code of DESIGN §9 (:class:`mfctl.errors.ExitCode`). Services report progress to
an :class:`Observer` and never print (DESIGN §3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Literal, Sequence, TypeVar

from mfctl.errors import ExitCode

T = TypeVar("T")


@dataclass
class HostResult(Generic[T]):
    """What one host gave: ``value`` (anything the per-host function returned), or ``error``
    (why it gave none). ``exit_code`` is OK, FAILED or UNREACHABLE (and so on: the code of the
    :class:`mfctl.errors.MfctlError` the function raised)."""

    host: str
    value: T | None = None
    error: str | None = None
    exit_code: ExitCode = ExitCode.OK

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    @property
    def unreachable(self) -> bool:
        return self.exit_code == ExitCode.UNREACHABLE


def outcome_of(value: Any) -> ExitCode:
    """A per-host value's own outcome: its ``exit_code`` attribute (a CommandResult has one: 4 when
    the host could not be reached or timed out, 1 for a non-zero exit), else OK."""
    code = getattr(value, "exit_code", ExitCode.OK)
    return ExitCode(int(code))


class Results(Sequence[HostResult[T]]):
    """The host results of one fan-out, in host order."""

    def __init__(self, items: Sequence[HostResult[T]]):
        self._items = list(items)

    @classmethod
    def of(cls, values: Sequence[Any], host: Callable[[Any], str] = lambda v: v.host) -> "Results":
        """Results of values that carry their host and outcome (CommandResult: ``.host``,
        ``.exit_code``, ``.error``)."""
        return cls([HostResult(host(v), v, getattr(v, "error", None), outcome_of(v)) for v in values])

    def __getitem__(self, i):  # type: ignore[override]
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[HostResult[T]]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"Results(ok={self.ok}, failed={self.failed}, unreachable={self.unreachable})"

    @property
    def hosts(self) -> list[str]:
        return [r.host for r in self._items]

    def values(self) -> list[T | None]:
        """Every host's value (None where it gave none), in host order."""
        return [r.value for r in self._items]

    def value_of(self, host: str) -> T | None:
        return next((r.value for r in self._items if r.host == host), None)

    @property
    def ok(self) -> list[str]:
        return [r.host for r in self._items if r.ok]

    @property
    def failed(self) -> list[str]:
        """Hosts that were reached but did not succeed (any outcome but OK and UNREACHABLE)."""
        return [r.host for r in self._items if not r.ok and not r.unreachable]

    @property
    def unreachable(self) -> list[str]:
        return [r.host for r in self._items if r.unreachable]

    def exit_code(self, *, unreachable: Literal["any", "all"] = "any") -> ExitCode:
        """The worst outcome as the command's exit code (DESIGN §9).

        ``unreachable="any"`` (exec, provision): 4 when any host was unreachable, else the worst
        other outcome (1 failed, 6 drift…), else 0. ``unreachable="all"`` (health: a sweep that
        reached some hosts has a verdict): 4 only when no host was reached; an unreachable host
        among reached ones counts as failed (1)."""
        codes = {r.exit_code for r in self._items} - {ExitCode.OK}
        if unreachable == "all" and ExitCode.UNREACHABLE in codes and len(self.unreachable) < len(self._items):
            codes = (codes - {ExitCode.UNREACHABLE}) | {ExitCode.FAILED}
        return min(codes, key=_severity, default=ExitCode.OK)


#: outcomes, worst first: a fan-out's exit code is the first of these that a host had
SEVERITY = (ExitCode.UNREACHABLE, ExitCode.INTERRUPTED, ExitCode.FAILED, ExitCode.LOCKED, ExitCode.CONFIG,
            ExitCode.DRIFT, ExitCode.USAGE)


def _severity(code: ExitCode) -> int:
    return SEVERITY.index(code) if code in SEVERITY else len(SEVERITY)
