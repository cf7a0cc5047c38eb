"""The old home of host sets and folding, re-exported until every importer has moved (issue 14 §2):
host selection is :mod:`mfctl.inventory.hostsets`, output folding :mod:`mfctl.cli.fold`."""

from __future__ import annotations

from mfctl.cli.fold import fold, one_host
from mfctl.inventory.hostsets import MAX_SET, _set_size, hostset, select_hosts

__all__ = ["MAX_SET", "_set_size", "fold", "hostset", "one_host", "select_hosts"]
