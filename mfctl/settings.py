"""Settings declared once: name, type, default, limits, ``MFCTL_*`` environment twin and help.

Read a setting with :func:`get` (the raw string), :func:`get_float` / :func:`get_int` (a number
checked against the declared limits) or :func:`value` (the declared type); the CLI builds its
options from the same declarations (:func:`mfctl.cli.common.option`) and shows the table with
``mfctl version --settings``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

#: words of a setting's name that make it a secret (``ocs_password``, ``*_token``, ``api_key``)
SECRET_WORDS = {"password", "passwd", "token", "secret"}

#: What Typer (pydantic) reads as true / false in a flag's environment variable (``MFCTL_JSON=yes``); :func:`value` too.
TRUE_WORDS = frozenset({"1", "true", "yes", "on", "t", "y"})
FALSE_WORDS = frozenset({"", "0", "false", "no", "off", "f", "n"})


@dataclass(frozen=True)
class Setting:
    """One setting. ``default`` is the string its variable would hold; ``type`` is what it means
    (str, int, float, bool or Path); ``min``/``max`` bound a number (inclusive, in its unit)."""

    name: str
    default: str
    help: str
    secret: bool = False  #: never shown (``mfctl version --settings`` says only whether it is set)
    type: type = str
    min: float | None = None
    max: float | None = None

    @property
    def env(self) -> str:
        return "MFCTL_" + self.name.upper()

    @property
    def is_secret(self) -> bool:
        """Declared secret, or named like one: a word of :data:`SECRET_WORDS`, or ending in
        ``_key`` (``host_key_policy`` and ``key_file`` are not: a policy, a path)."""
        words = self.name.lower().split("_")
        return self.secret or bool(SECRET_WORDS & set(words)) or words[-1] == "key"

    @property
    def limits(self) -> tuple[float, float]:
        """(lowest, highest) accepted; ±inf where the declaration sets none."""
        return (-math.inf if self.min is None else self.min, math.inf if self.max is None else self.max)

    def limits_text(self) -> str:
        """``"from 1 to 4096"``, ``"at least 0.05"``, or "" for a setting without limits."""
        lo, hi = (_num(x) for x in (self.min, self.max))
        if self.min is not None and self.max is not None:
            return f"from {lo} to {hi}"
        return f"at least {lo}" if self.min is not None else (f"at most {hi}" if self.max is not None else "")

    def number(self, raw: str) -> float:
        """``raw`` as a number within the limits; raises UsageError (exit 2) naming the variable."""
        try:
            v = float(raw)
        except ValueError:
            v = math.nan
        lo, hi = self.limits
        if not (math.isfinite(v) and lo <= v <= hi):
            from mfctl.errors import UsageError

            raise UsageError(f"{self.env}={raw!r}: expected a number {self.limits_text() or '(finite)'}")
        return v

    def parse(self, raw: str):
        """``raw`` (a variable's value, or the default) as the declared type: None for an empty
        path or number, False for an empty flag; an int is truncated (``8.5`` is 8). Raises
        UsageError (exit 2) naming the variable for a number out of its limits."""
        if self.type is str:
            return raw
        if raw == "":
            return False if self.type is bool else None
        if self.type is bool:
            return raw.strip().lower() in TRUE_WORDS
        if self.type is Path:
            return Path(raw)
        v = self.number(raw)
        return int(v) if self.type is int else v


def _num(x: float | None) -> str:
    """1099511627776, not 1.09951e+12; 0.05, not 0.05000."""
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


_DAY = 86400.0  # a timeout beyond a day is a typo, not a wish

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("state_dir", "~/.local/state/mfctl", "Where locks, the mock testbed and logs live.", type=Path),
        Setting("lock_dir", "", "Where device locks live, shared by every state directory and user of this machine "
                "(default: /run/lock/mfctl if writable, else <tmp>/mfctl-locks).", type=Path),
        Setting("runs_dir", "runs", "Where run directories (metrics DB, journal, logs) are written.", type=Path),
        Setting("connect_timeout", "10", "SSH / OCS connect timeout, seconds.", type=float, min=0.05, max=_DAY),
        Setting("command_timeout", "30", "Per-command timeout on hosts and the OCS, seconds.", type=float,
                min=0.05, max=_DAY),
        Setting("firmware_burn_timeout", "900", "Timeout of one NIC firmware burn (mlxfwmanager -u, with its sha256sum "
                "check), seconds: a burn outlasts the per-command timeout (NVIDIA documents no burn time; 15 min is "
                "mfctl's allowance).", type=float, min=1, max=_DAY),
        Setting("firmware_reset_timeout", "300", "Timeout of one mlxfwreset (query or reset: driver restart and PCI "
                "reset), seconds (NVIDIA documents no reset time; 5 min is mfctl's allowance).", type=float,
                min=1, max=_DAY),
        Setting("fanout", "32", "Maximum number of hosts contacted at once.", type=int, min=1, max=4096),
        Setting("drain_timeout", "3600", "mfctl provision apply: seconds a Slurm node is given to finish its jobs "
                "(DRAINING → DRAINED) before its NIC reset; past it the host is left untouched.", type=float,
                min=0.05, max=_DAY),
        Setting("max_output_bytes", "4194304", "Bytes of a host command's stdout and of its stderr kept (each; 4 MiB): "
                "the rest is read and dropped, and the result says it was truncated.", type=int, min=1, max=1 << 40),
        Setting("log_file", "", "Log file (default: <state_dir>/mfctl.log).", type=Path),
        Setting("progress_interval", "5", "Seconds between two progress count lines when stderr is not a terminal "
                "(CI logs, pipes; a phase's steps and its end are always said).", type=float, min=0, max=_DAY),
        Setting("ocs_password", "", "OCS TL1 password, read from this variable by every inventory whose "
                "ocs.password_env is left at its default (an ocs.password_file wins; never stored in inventories).",
                secret=True),
        Setting("lock_password", "", "The testbed lock service's password (lock.backend redis), read from this variable "
                "by every inventory whose lock.password_env is left at its default (a lock.password_file wins).",
                secret=True),
        Setting("lock_token", "", "A testbed lock's token (mfctl lock acquire): a command run with it works under that "
                "lease instead of taking the lock (the holder keeps renewing and releasing it).", secret=True),
        # environment twins of command-line options (the CLI's options are built from these: mfctl.cli.common.option)
        Setting("inventory", "", "--inventory/-i of every command that takes one: the inventory YAML.", type=Path),
        Setting("json", "", "Print one JSON object on stdout (--json, for CI).", type=bool),
        Setting("yes", "", "Do not ask for confirmation (--yes/-y).", type=bool),
        Setting("skip_health", "", "mfctl run --skip-health.", type=bool),
        Setting("planner_kernel", "auto", "The circuit planner's local search: compiled (mfctl/fabric/_search_kernel.c, "
                "built at install where a C compiler is found), numpy (the same search, ~7x slower), or auto: compiled "
                "where it was built."),
        Setting("yaml_loader", "auto", "How mfctl parses YAML: libyaml (PyYAML's compiled CSafeLoader, ~5x faster on a "
                "large inventory), pure (PyYAML's pure-Python SafeLoader), or auto: libyaml where PyYAML has it. The "
                "same documents and errors either way."),
        Setting("mock_state_dir", "", "mfctl mock --state-dir (default: <state_dir>/mock).", type=Path),
        Setting("mock_time_scale", "1", "mfctl mock up --time-scale: simulated seconds per wall second.", type=float,
                min=0.01, max=10000),
        Setting("mock_torchrun", "mock", "The torchrun the mock's hosts run: mock (mfctl.mock.torchrun: real torchrun's "
                "ranks, environment, exits and signals, without torch), real (the torchrun installed beside mfctl's "
                "Python, from torch), or the absolute path of a torchrun."),
        Setting("mock_sshd", "auto", "mfctl mock up --sshd: what serves the mock's hosts — openssh (a real sshd per host "
                "on 127.0.0.1), paramiko (in the mock's process), or auto: openssh where sshd is installed."),
    ]
}


def get(name: str) -> str:
    """Return the setting ``name`` from its ``MFCTL_*`` variable, else its default. A variable
    set to the empty string counts as unset (``MFCTL_STATE_DIR= mfctl …`` is the default state
    directory, not the working directory)."""
    s = SETTINGS[name]
    return os.environ.get(s.env) or s.default


#: a secret setting's value (and default) wherever settings are listed (``mfctl version --settings``)
SECRET_SHOWN = "********"


def table() -> list[dict]:
    """Every setting as ``mfctl version --settings --json`` lists it: name, variable, default,
    value, help, whether it is secret and set, its type and limits. A secret's value and default
    are :data:`SECRET_SHOWN` when not empty — never themselves."""
    rows = []
    for s in SETTINGS.values():
        value = get(s.name)
        row = {"name": s.name, "env": s.env, "default": s.default, "value": value, "help": s.help,
               "secret": s.is_secret, "set": bool(os.environ.get(s.env)), "type": s.type.__name__,
               "min": s.min, "max": s.max}
        if s.is_secret:  # the default too: a secret with a default is still a secret
            row["value"] = SECRET_SHOWN if value else ""
            row["default"] = SECRET_SHOWN if s.default else ""
        rows.append(row)
    return rows


def value(name: str):
    """The setting ``name`` as its declared type (:meth:`Setting.parse` of :func:`get`)."""
    return SETTINGS[name].parse(get(name))


def get_float(name: str) -> float:
    """A numeric setting. Raises UsageError (exit 2) naming the variable when it is not a
    finite number within the declared limits."""
    return SETTINGS[name].number(get(name))


def get_int(name: str) -> int:
    """A numeric setting, truncated to an int (``MFCTL_FANOUT=8.5`` is 8, as it always was)."""
    return int(get_float(name))


def state_path() -> Path:
    """Where the state directory is, without creating or checking it: for optional files (the
    inventory cache, NIC readings) whose callers carry on when it cannot be used."""
    return Path(get("state_dir")).expanduser()


def state_dir() -> Path:
    """The state directory (created if missing). Raises ConfigError (exit 3) naming
    MFCTL_STATE_DIR when it cannot be a directory (under a file, unwritable, …)."""
    from mfctl.errors import ConfigError

    p = state_path()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"state directory {p} (MFCTL_STATE_DIR) is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"state directory {p} (MFCTL_STATE_DIR): {e.strerror or e}") from None
    return p
