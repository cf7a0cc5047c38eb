"""Testbed inventory: pydantic models, YAML loading with file:line errors, cross-checks.

The names below are imported when first used (PEP 562): ``mfctl.inventory.cache`` can then be
read without building the pydantic models (``mfctl exec`` reads it that way before its CLI loads).
"""

__all__ = ["Inventory", "load_inventory", "load_yaml_with_lines"]


def __getattr__(name: str):
    if name in ("load_inventory", "load_yaml_with_lines"):
        from mfctl.inventory import loader

        return getattr(loader, name)
    if name == "Inventory":
        from mfctl.inventory.models import Inventory

        return Inventory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
