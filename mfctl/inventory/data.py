"""The validated inventory as plain JSON data, for the commands that only need its hosts.

``mfctl exec`` needs host names, regions and SSH endpoints, nothing else; building the pydantic
models for them (~25 ms of imports and class construction) is a fifth of its start. When the
file validated before, :func:`load_inventory_data` returns the inventory cache's JSON (checksum
checked, validated by the same code when it was stored: :mod:`mfctl.inventory.cache`) without
importing pydantic; otherwise it loads and validates the file like :func:`~mfctl.inventory.load_inventory`
(which stores it in the cache) and returns the same JSON shape (``Inventory.model_dump(mode="json")``).
"""

from __future__ import annotations

import json
from pathlib import Path


def load_inventory_data(path: str | Path) -> dict:
    """The inventory at ``path`` as JSON-shaped data (keys and defaults as in the schema).
    Raises ConfigError (exit 3) like :func:`~mfctl.inventory.load_inventory` for a file that is
    unreadable or invalid."""
    from mfctl.inventory import cache
    from mfctl.inventory.files import read_config

    body = cache.entry(read_config(path))  # (ConfigError for a file unreadable or too large)
    if body is not None:
        try:
            return json.loads(body)
        except ValueError:
            pass  # checksum right but not JSON: only an mfctl bug could store that; load the file
    from mfctl.inventory.loader import load_inventory

    return load_inventory(path).model_dump(mode="json")
