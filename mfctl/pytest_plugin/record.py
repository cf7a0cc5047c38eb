"""What one test did to the testbed, for its report: the OCS journal records written during it
(the device's journal, from the sequence number it had when the test began), the commands sent
(TL1 changes and host commands) and the hosts' output. Attached to the test's report as
``user_properties`` (JUnit ``properties``) and as report sections (pytest's own report, and JUnit
``system-out`` with ``junit_logging = system-out``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

MAX_SECTION_CHARS = 20_000  #: per section of a report: a chatty host is cut, and says so


@dataclass
class TestRecord:
    """One test's record. ``journals``: each device journal opened during the test (one per OCS
    it used) → the last sequence number in it before the test; ``journal``: the first of them
    (None until an OCS was opened)."""

    __test__ = False  # (not a test class, whatever its name)

    journals: dict[Path, int] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    host_logs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def journal(self) -> Path | None:
        return next(iter(self.journals), None)

    def start_journal(self, path: Path | None) -> None:
        """Remember where this test's slice of a device journal begins (once per journal)."""
        if path is None or Path(path) in self.journals:
            return
        recs = _records(Path(path))
        self.journals[Path(path)] = max((r.get("seq", -1) for r in recs if isinstance(r.get("seq"), int)), default=-1)

    def journal_slice(self) -> list[dict]:
        """The device journals' records written since :meth:`start_journal` (journal by journal, in the
        order the test opened the OCSes; with several OCSes each record names its ``ocs``)."""
        return [r for path, seq in self.journals.items() for r in _records(path)
                if isinstance(r.get("seq"), int) and r["seq"] > seq]

    def host_command(self, result) -> None:
        """A host command's result (:class:`mfctl.transport.ssh.CommandResult`): the command, and its output."""
        from mfctl.transport.ssh import quote_argv

        self.commands.append(f"{result.host}: {quote_argv(result.argv)}")
        status = f"error: {result.error}" if result.error else f"rc={result.rc}"
        text = f"---- {result.host}: {quote_argv(result.argv)} ({status}, {result.elapsed_s:.3f} s) ----\n"
        text += result.stdout + ("" if not result.stdout or result.stdout.endswith("\n") else "\n")
        if result.stderr:
            text += "[stderr]\n" + result.stderr + ("" if result.stderr.endswith("\n") else "\n")
        self.host_logs.append(text)

    def ocs_commands(self, commands: list[str], ocs: str | None = None) -> None:
        """TL1 changes sent to the OCS (``ocs``: its name, on a testbed of several)."""
        self.commands.extend(f"ocs{'/' + ocs if ocs else ''}: {c}" for c in commands)

    def attach(self, item) -> None:
        """Put the record on ``item``'s report: properties and sections."""
        from mfctl.junit import xml_text

        recs = self.journal_slice()
        if recs:
            item.user_properties.append(("mfctl.ocs_journal", json.dumps(recs, separators=(",", ":"), default=str)))
        if self.commands:
            item.user_properties.append(("mfctl.commands", "\n".join(self.commands)))
        for title, lines in (("mfctl OCS journal", [json.dumps(r, default=str) for r in recs]),
                             ("mfctl commands", self.commands), ("mfctl host logs", self.host_logs),
                             ("mfctl testbed", self.notes)):
            if lines:
                text = "\n".join(x.rstrip("\n") for x in lines)
                if len(text) > MAX_SECTION_CHARS:
                    text = text[:MAX_SECTION_CHARS] + f"\n[... {len(text) - MAX_SECTION_CHARS} more characters]"
                # (the stdout sections are what JUnit's system-out holds with junit_logging = system-out)
                item.add_report_section("teardown", "stdout", f"---- {title} ----\n{xml_text(text)}\n")


def _records(path: Path) -> list[dict]:
    from mfctl.ocs.journal import Journal

    if not path.exists():
        return []
    try:
        return Journal(path).records()
    except OSError:
        return []
