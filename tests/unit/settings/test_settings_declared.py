"""mfctl.settings: one declaration per setting, read as its type within its limits."""

from pathlib import Path

import pytest

from mfctl import settings
from mfctl.errors import UsageError
from mfctl.settings import SETTINGS, Setting


def test_numbers_are_read_within_their_declared_limits(monkeypatch):
    assert settings.get_int("fanout") == 32 and settings.value("fanout") == 32
    monkeypatch.setenv("MFCTL_FANOUT", "8.5")
    assert settings.get_int("fanout") == 8 and settings.value("fanout") == 8  # truncated, as ever
    monkeypatch.setenv("MFCTL_CONNECT_TIMEOUT", "0.05")
    assert settings.get_float("connect_timeout") == 0.05
    for raw, shown in (("0.04", "from 0.05 to 86400"), ("inf", "from 0.05 to 86400"), ("ten", "from 0.05 to 86400")):
        monkeypatch.setenv("MFCTL_CONNECT_TIMEOUT", raw)
        with pytest.raises(UsageError, match=f"MFCTL_CONNECT_TIMEOUT='{raw}': expected a number {shown}$"):
            settings.get_float("connect_timeout")
    monkeypatch.setenv("MFCTL_MAX_OUTPUT_BYTES", "0")
    with pytest.raises(UsageError, match="from 1 to 1099511627776$"):
        settings.get_int("max_output_bytes")


def test_values_have_their_declared_types(monkeypatch):
    assert settings.value("json") is False and settings.value("inventory") is None
    monkeypatch.setenv("MFCTL_JSON", "Yes")
    monkeypatch.setenv("MFCTL_INVENTORY", "inv.yaml")
    assert settings.value("json") is True and settings.value("inventory") == Path("inv.yaml")
    assert settings.value("mock_time_scale") == 1.0 and settings.value("state_dir") == Path(settings.get("state_dir"))
    monkeypatch.setenv("MFCTL_STATE_DIR", "")  # empty is unset
    assert settings.value("state_dir") == Path("~/.local/state/mfctl")


def test_limits_are_declared_with_the_setting_and_describe_themselves():
    s = SETTINGS["fanout"]
    assert (s.type, s.min, s.max, s.limits, s.limits_text()) == (int, 1, 4096, (1, 4096), "from 1 to 4096")
    assert Setting("x", "0", "", type=float, min=0.5).limits_text() == "at least 0.5"
    assert Setting("x", "0", "", type=float, max=2).limits_text() == "at most 2"
    assert SETTINGS["runs_dir"].limits_text() == "" and SETTINGS["runs_dir"].limits[0] == float("-inf")
    every_number = [n for n, x in SETTINGS.items() if x.type in (int, float) and x.min is not None]
    assert every_number == ["connect_timeout", "command_timeout", "firmware_burn_timeout", "firmware_reset_timeout",
                            "fanout", "drain_timeout", "max_output_bytes", "progress_interval", "mock_time_scale"]
    for x in SETTINGS.values():  # every declared default is a valid value of its own setting
        x.parse(x.default)


def test_the_table_never_holds_a_secret_not_even_a_default(monkeypatch):
    monkeypatch.setitem(SETTINGS, "api_key", Setting("api_key", "built-in-key", "A key."))
    monkeypatch.setenv("MFCTL_OCS_PASSWORD", "pw-123")
    rows = {r["name"]: r for r in settings.table()}
    assert (rows["api_key"]["value"], rows["api_key"]["default"]) == (settings.SECRET_SHOWN, settings.SECRET_SHOWN)
    assert rows["ocs_password"]["value"] == settings.SECRET_SHOWN and rows["ocs_password"]["set"] is True
    assert "pw-123" not in repr(rows) and "built-in-key" not in repr(rows)
    assert rows["fanout"] == {"name": "fanout", "env": "MFCTL_FANOUT", "default": "32", "value": "32",
                                   "help": SETTINGS["fanout"].help, "secret": False, "set": False, "type": "int",
                                   "min": 1, "max": 4096}
