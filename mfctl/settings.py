"""Settings declared once: name, default, ``MFCTL_*`` environment twin and help.

Read a setting with :func:`get`; the CLI shows the table with ``mfctl version --settings``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


#: words of a setting's name that make it a secret (``ocs_password``, ``*_token``, ``api_key``)
SECRET_WORDS = {"password", "passwd", "token", "secret"}


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    secret: bool = False  #: never shown (``mfctl version --settings`` says only whether it is set)

    @property
    def env(self) -> str:
        return "MFCTL_" + self.name.upper()

    @property
    def is_secret(self) -> bool:
        """Declared secret, or named like one: a word of :data:`SECRET_WORDS`, or ending in
        ``_key`` (``host_key_policy`` and ``key_file`` are not: a policy, a path)."""
        words = self.name.lower().split("_")
        return self.secret or bool(SECRET_WORDS & set(words)) or words[-1] == "key"


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("state_dir", "~/.local/state/mfctl", "Where locks, the mock testbed and logs live."),
        Setting("lock_dir", "", "Where device locks live, shared by every state directory and user of this machine "
                "(default: /run/lock/mfctl if writable, else <tmp>/mfctl-locks)."),
        Setting("runs_dir", "runs", "Where run directories (metrics DB, journal, logs) are written."),
        Setting("connect_timeout", "10", "SSH / OCS connect timeout, seconds."),
        Setting("command_timeout", "30", "Per-command timeout on hosts and the OCS, seconds."),
        Setting("fanout", "32", "Maximum number of hosts contacted at once."),
        Setting("max_output_bytes", "4194304", "Bytes of a host command's stdout and of its stderr kept (each; 4 MiB): "
                "the rest is read and dropped, and the result says it was truncated."),
        Setting("host_key_policy", "strict", "SSH host keys: 'strict' (known_hosts only) or 'accept-new'."),
        Setting("log_file", "", "Log file (default: <state_dir>/mfctl.log)."),
        Setting("ocs_password", "", "OCS TL1 password (never stored in inventories).", secret=True),
        # environment twins of command-line options (read by the CLI, listed here for reference)
        Setting("inventory", "", "--inventory/-i of every command that takes one."),
        Setting("json", "", "--json: one JSON object on stdout."),
        Setting("yes", "", "--yes: do not ask for confirmation."),
        Setting("skip_health", "", "mfctl run --skip-health."),
        Setting("mock_state_dir", "", "mfctl mock --state-dir (default: <state_dir>/mock)."),
        Setting("mock_time_scale", "1", "mfctl mock up --time-scale."),
    ]
}


def get(name: str) -> str:
    """Return the setting ``name`` from its ``MFCTL_*`` variable, else its default. A variable
    set to the empty string counts as unset (``MFCTL_STATE_DIR= mfctl …`` is the default state
    directory, not the working directory)."""
    s = SETTINGS[name]
    return os.environ.get(s.env) or s.default


#: (lowest, highest) accepted for numeric settings; a timeout beyond a day is a typo, not a wish
LIMITS = {"connect_timeout": (0.05, 86400.0), "command_timeout": (0.05, 86400.0), "fanout": (1, 4096),
          "max_output_bytes": (1, 1 << 40)}


def get_float(name: str) -> float:
    """A numeric setting. Raises UsageError (exit 2) naming the variable when it is not a
    finite number within :data:`LIMITS`."""
    import math

    from mfctl.errors import UsageError

    raw = get(name)
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    lo, hi = LIMITS.get(name, (-math.inf, math.inf))
    if not (math.isfinite(v) and lo <= v <= hi):
        shown = [str(int(x)) if float(x).is_integer() else f"{x:g}" for x in (lo, hi)]  # 1099511627776, not 1.09951e+12
        raise UsageError(f"{SETTINGS[name].env}={raw!r}: expected a number from {shown[0]} to {shown[1]}")
    return v


def get_int(name: str) -> int:
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
