"""A default file an mfctl command looks up in its checkout (``mock up``'s inventory, ``provision``'s
recipe): when there is none (an mfctl installed from a wheel), a usage error that says so and what to
give, not "cannot read: No such file" (the trial's non-editable install)."""

from pathlib import Path

import pytest

from mfctl.cli import common
from mfctl.errors import UsageError


def test_the_checkouts_copy_is_found_from_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = common.shipped(Path("inventory/mfabric-prototype.yaml"), Path("inventory/mfabric-prototype.yaml"))
    assert got.is_absolute() and got.is_file()


def test_without_a_checkout_the_default_is_a_clear_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "__file__", str(tmp_path / "site-packages" / "mfctl" / "cli" / "common.py"))
    with pytest.raises(UsageError, match=r"the default inventory/mfabric-prototype.yaml is neither here nor in an "
                                         r"mfctl checkout .*: give the file's path"):
        common.shipped(Path("inventory/mfabric-prototype.yaml"), Path("inventory/mfabric-prototype.yaml"))
    assert common.shipped(Path("mine.yaml"), Path("inventory/mfabric-prototype.yaml")) == Path("mine.yaml")
