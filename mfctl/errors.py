"""Typed errors and the exit-code contract (DESIGN §9).

Every error mfctl raises on purpose derives from :class:`MfctlError` and carries the
exit code the CLI returns for it, so the CLI maps errors to exit codes in one place.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes, shared by every command (DESIGN §9)."""

    OK = 0
    FAILED = 1  #: the operation failed on at least one target
    USAGE = 2
    CONFIG = 3  #: inventory / playbook / configuration invalid
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
