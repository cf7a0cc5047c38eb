"""What a check is (:class:`Check`) and what it works on (:class:`Probe`: one host under the sweep).

A check declares the commands it runs on a host (``argv``), the parser of their output
(``parse``: a parser of :mod:`mfctl.hosts`, text → typed data, ParseError on anything else) and
its judgement (``judge``: typed data → findings). The runner (:mod:`mfctl.health.runner`) runs the
commands — each distinct command once per host, however many checks read it — parses, and
judges; judges never run commands and never print.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

from mfctl.health.findings import Finding, HostHealth


@dataclass(frozen=True)
class Check:
    """One named check (``mfctl health --checks``).

    ``argv(probe)`` gives this host's commands by what each reads (``{"ibstat": [...]}``, or one
    per lane or NIC: ``{netdev: [...]}``; ``{}``: nothing to check here). ``parse`` is one parser
    for every command, a mapping from the keys of ``argv`` to parsers, or None: the judge then gets
    the :class:`~mfctl.transport.ssh.CommandResult` itself and judges failures too (``gpu``,
    ``links``); otherwise a command that failed is left out and output that does not parse is a
    ``<group>.unparsable`` warning. ``judge(probe, {key: data})`` adds findings. ``run(probe,
    argv)``: how a command is run (default :meth:`Probe.run`; the GPU query falls back to older
    drivers' field names). ``needs``: checks whose facts this one reads (selected with it)."""

    name: str
    group: str  # the findings' group (Finding.check, the JUnit test case)
    runs: str  # what it runs, for people (--list-checks)
    judges: str  # what it judges, for people
    argv: Callable[["Probe"], Mapping[Any, list[str]]]
    parse: Callable[[str], Any] | Mapping[Hashable, Callable[[str], Any]] | None
    judge: Callable[["Probe", dict], None]
    default: bool = True
    needs: tuple[str, ...] = ()
    run: Callable[["Probe", list[str]], Any] | None = None

    def parser(self, key: Hashable) -> Callable[[str], Any] | None:
        return self.parse.get(key) if isinstance(self.parse, Mapping) else self.parse


@dataclass
class Probe:
    """One host under the sweep: its inventory entry (``host``), the limits (``lim``, from
    :func:`mfctl.health.thresholds.thresholds`), the time of the sweep (``now``, epoch s), the NIC
    readings' history (``baseline``), what it found (``health``) and what checks tell later ones
    (``facts``: ``gpu_by_pci``, ``links_up``…).

    :meth:`run` runs each distinct command once (a second check reading it gets the same
    result). A host that answers nothing is *gone* after its first command that could not connect
    (a timeout is an answer of sorts: the host was reached, the tool hung): no more commands are
    sent to it."""

    pool: Any
    host: Any  # mfctl.inventory.models.Host
    lim: dict[str, float]
    now: float = field(default_factory=time.time)
    baseline: dict | None = None
    since_boot: bool = False
    health: HostHealth = None  # type: ignore[assignment]
    facts: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the check being judged (its findings' source)
    group: str = ""
    answered: bool = False
    gone: Any = None  # the CommandResult that could not connect
    _results: dict[tuple, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.health is None:
            self.health = HostHealth(self.host.name)

    @property
    def name(self) -> str:
        return self.host.name

    def run(self, argv: list[str]):
        """The result of ``argv`` on this host (run once per sweep; never raises)."""
        from mfctl.transport.ssh import CommandResult

        key = tuple(argv)
        if key in self._results:
            return self._results[key]
        if self.gone is not None:
            return CommandResult(self.name, list(argv), error=self.gone.error, endpoint=self.gone.endpoint)
        r = self._results[key] = self.pool.run(self.name, list(argv))
        if r.error is None:
            self.answered = True
        elif not self.answered and not r.error.startswith("timeout"):
            self.gone = r
        return r

    @property
    def unreachable(self):
        """The result that says why the host could not be reached (its first command's that could not
        connect, or, when every command it ran hung, the first), or None: it answered."""
        if self.gone is not None:
            return self.gone
        return None if self.answered or not self._results else next(iter(self._results.values()))

    def add(self, severity: str, message: str, code: str, **kw) -> None:
        """A finding of the check being judged (its group and name)."""
        self.health.findings.append(Finding(self.name, severity, kw.pop("group", self.group), message, code,
                                            source=self.source, **kw))


def fold_numbers(numbers: list[int]) -> str:
    """``397-768,800`` for those ports or lanes (ClusterShell's range syntax, as host sets are written)."""
    from ClusterShell.RangeSet import RangeSet

    return str(RangeSet.fromlist([str(n) for n in numbers]))
