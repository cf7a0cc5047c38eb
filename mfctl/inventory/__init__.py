"""Testbed inventory: pydantic models, YAML loading with file:line errors, cross-checks."""

from mfctl.inventory.loader import load_inventory, load_yaml_with_lines
from mfctl.inventory.models import Inventory

__all__ = ["Inventory", "load_inventory", "load_yaml_with_lines"]
