"""Which local search the planner runs: the compiled one or numpy (setting ``planner_kernel``).

Apart from :mod:`mfctl.fabric.search` so that ``mfctl version`` can say it without importing numpy.
"""

from __future__ import annotations

import importlib.util

from mfctl import settings
from mfctl.errors import ConfigError

KINDS = ("auto", "compiled", "numpy")


def built() -> bool:
    """Whether ``mfctl.fabric._search_kernel`` was built at install (a C compiler and Python's headers were there)."""
    return importlib.util.find_spec("mfctl.fabric._search_kernel") is not None


def chosen(is_built: bool) -> str:
    """``"compiled"`` or ``"numpy"``: what the setting asks for (``auto``: compiled where ``is_built``).
    Another word, or ``compiled`` where it was not built, is a ConfigError saying so (exit 3)."""
    env = settings.SETTINGS["planner_kernel"].env
    want = settings.get("planner_kernel").strip().lower()
    if want not in KINDS:
        raise ConfigError(f"{env}={want!r}: one of {', '.join(KINDS)}")
    if want == "compiled" and not is_built:
        raise ConfigError(f"{env}=compiled, but mfctl.fabric._search_kernel was not built (no C compiler or Python "
                          "headers at install): reinstall with them, or use auto")
    return "compiled" if want != "numpy" and is_built else "numpy"
