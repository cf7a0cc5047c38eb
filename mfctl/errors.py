"""Typed errors and the exit-code contract (DESIGN §9).

Every error mfctl raises on purpose derives from :class:`MfctlError` and carries the
exit code the CLI returns for it, so the CLI maps errors to exit codes in one place
(:func:`mfctl.cli.common.handle_errors`). :data:`EXIT_CODES` is the one table of what each code
means and which errors give it: ``mfctl --help`` (its epilog), ``mfctl version --exit-codes``
and docs/exit-codes.md show it, and tests/cli/test_help_and_exit_codes.py checks every command
against it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ExitCode(enum.IntEnum):
    """Process exit codes, shared by every command (DESIGN §9)."""

    OK = 0
    FAILED = 1  #: the operation failed on at least one target
    USAGE = 2  #: the command line (or an MFCTL_* variable standing for an option) cannot be right
    CONFIG = 3  #: inventory / playbook / configuration invalid, or a data file mfctl reads is damaged
    UNREACHABLE = 4  #: a target was unreachable or timed out
    LOCKED = 5  #: the testbed lock is held by someone else
    DRIFT = 6  #: drift found in check / dry-run mode
    INTERRUPTED = 130


class MfctlError(Exception):
    """Base of all mfctl errors. ``exit_code`` is what the CLI returns."""

    exit_code: ExitCode = ExitCode.FAILED

    def to_dict(self) -> dict:
        return {"type": type(self).__name__, "message": str(self), "exit_code": int(self.exit_code)}


class ConfigError(MfctlError):
    """An inventory, playbook or setting is invalid. Message names file and line."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 more: list[tuple[int | None, str]] | None = None):
        """``more``: the file's other problems, ``(line, message)`` each: every one is said (one
        per line after the first) and listed in :meth:`to_dict`'s ``problems``."""
        self.path, self.line = path, line
        self.problems = [(line, message), *(more or [])]
        where = lambda ln: f"{path}:{ln}: " if path and ln else (f"{path}: " if path else "")  # noqa: E731
        text = f"{where(line)}{message}"
        if more:
            text += f" ({len(more)} more problem(s) below)" + "".join(f"\n  {where(ln)}{m}" for ln, m in more)
        super().__init__(text)

    def to_dict(self) -> dict:
        return super().to_dict() | {"problems": [{"path": self.path, "line": ln, "message": m} for ln, m in self.problems]}


class DataError(ConfigError):
    """A data file mfctl wrote and reads back (a run's ``summary.json`` or ``metrics.db``) is
    damaged or is not one: exit 3, as an invalid inventory is — the file is wrong, not the command
    line. The message names the file."""


class UsageError(MfctlError):
    """A command was called with an argument that cannot be right."""

    exit_code = ExitCode.USAGE


class UnreachableError(MfctlError):
    """A host or device could not be reached, or an operation on it timed out."""

    exit_code = ExitCode.UNREACHABLE


class SSHKeyError(UnreachableError):
    """A host cannot be reached because the SSH key the inventory names cannot be used (missing,
    not a private key, protected by a passphrase): the inventory's to fix, so exit 3."""

    exit_code = ExitCode.CONFIG


class LockError(MfctlError):
    """The testbed lock is held by another run."""

    exit_code = ExitCode.LOCKED


class OperationFailed(MfctlError):
    """An operation ran but did not succeed on at least one target."""

    exit_code = ExitCode.FAILED


class Interrupted(MfctlError):
    """The operator interrupted the operation (Ctrl-C / SIGTERM)."""

    exit_code = ExitCode.INTERRUPTED


class ParseError(MfctlError):
    """A tool's output did not have the expected shape.

    Carries the tool name, the 1-based line number and what was expected, so an operator
    can see at once which output broke which assumption.
    """

    def __init__(self, tool: str, line_no: int | None, expected: str, got: str = ""):
        self.tool, self.line_no, self.expected, self.got = tool, line_no, expected, got
        where = f" line {line_no}" if line_no is not None else ""
        shown = got if len(got) <= 80 else got[:77] + "..."
        super().__init__(f"{tool}: output{where}: expected {expected}" + (f", got {shown!r}" if got else ""))


class InputNotParsed(ParseError):
    """A ParseError in a file the operator gave (``mfctl parse``): invalid input, so exit 3 like any
    invalid file, where a host's output that is not understood is a failure on that target (1)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, e: ParseError, kind: str | None):
        super().__init__(e.tool, e.line_no, e.expected, e.got)
        self.kind = kind

    def to_dict(self) -> dict:
        return super().to_dict() | {"type": "ParseError", "kind": self.kind, "tool": self.tool, "line": self.line_no,
                                    "expected": self.expected, "got": self.got}


@dataclass(frozen=True)
class ExitCodeInfo:
    """One row of :data:`EXIT_CODES`: the code, a few words (``mfctl --help``), what it means, and
    the error types (of this module, or what else) that give it."""

    code: ExitCode
    label: str
    meaning: str
    raised_by: tuple[str, ...]


#: The exit-code table, one row per :class:`ExitCode`, in order (docs/exit-codes.md says the same).
EXIT_CODES: tuple[ExitCodeInfo, ...] = (
    ExitCodeInfo(ExitCode.OK, "ok", "done; also a reader leaving early (mfctl ... | head) and mfctl metrics serve "
                 "stopped by SIGTERM or Ctrl-C, its normal end (it says 'stopped')", ()),
    ExitCodeInfo(ExitCode.FAILED, "failed on a target",
                 "the operation ran and failed on at least one target: a host's command, a critical health finding, a "
                 "refused OCS command, a run that failed, a host's tool output not understood, an I/O error, a port "
                 "already in use, a change not confirmed at the prompt", ("OperationFailed", "ParseError", "MfctlError")),
    ExitCodeInfo(ExitCode.USAGE, "usage",
                 "the command line cannot be right: an unknown option, a missing argument, a value of the wrong type "
                 "or out of range (also from the option's MFCTL_* variable), an unknown host or run, a path given that "
                 "cannot be written; a change asked for without a terminal and without --yes",
                 ("UsageError", "click.UsageError")),
    ExitCodeInfo(ExitCode.CONFIG, "invalid inventory/config/data",
                 "an inventory, playbook, recipe, topology, traffic or tool-output file given is invalid or cannot "
                 "be read (the message names file and line; mfctl parse: tool, line, expectation), "
                 "a setting is unusable (the state directory, an SSH key), or a data file mfctl reads back is "
                 "damaged (a run's summary.json or metrics.db)",
                 ("ConfigError", "SSHKeyError", "DataError", "InputNotParsed")),
    ExitCodeInfo(ExitCode.UNREACHABLE, "unreachable/timeout",
                 "a host or the OCS could not be reached, or an operation on it timed out", ("UnreachableError",)),
    ExitCodeInfo(ExitCode.LOCKED, "lock held",
                 "the testbed or device lock is held by someone else (the message says who, since when and why); a "
                 "mock testbed is already up", ("LockError",)),
    ExitCodeInfo(ExitCode.DRIFT, "drift in check mode",
                 "a check or dry run found the testbed differs from what is desired (provision plan/check, firmware "
                 "check, ocs ... --dry-run)", ()),
    ExitCodeInfo(ExitCode.INTERRUPTED, "interrupted",
                 "Ctrl-C, SIGTERM or SIGHUP (mfctl: interrupted ...); at a confirmation prompt nothing was changed; "
                 "a change under way is finished and read back first", ("Interrupted", "KeyboardInterrupt")),
)


def exit_code_info(code: int) -> ExitCodeInfo:
    """The :data:`EXIT_CODES` row of ``code``; KeyError for a code mfctl does not use."""
    for row in EXIT_CODES:
        if row.code == code:
            return row
    raise KeyError(code)


def exit_codes_line() -> str:
    """The table in one line (``0 ok, 1 failed on a target, ...``), as ``mfctl --help`` ends."""
    return ", ".join(f"{int(r.code)} {r.label}" for r in EXIT_CODES)
