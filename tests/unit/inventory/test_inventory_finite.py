"""Every float of an inventory is a finite number: ``.inf``/``.nan`` passed ``gt=0``/``ge=0`` and
``inventory validate`` said valid, then ``mock up`` wrote ``null`` and every ``ocs`` command failed."""

import subprocess

import pytest

from mfctl.errors import ConfigError, ExitCode
from mfctl.inventory import load_inventory
from support import PROTOTYPE, mfctl_cmd


def _mutate(tmp_path, old, new):
    src = PROTOTYPE.read_text()
    assert old in src
    p = tmp_path / "bad.yaml"
    p.write_text(src.replace(old, new, 1))
    return p, next(i for i, ln in enumerate(p.read_text().splitlines(), 1) if new.strip() in ln)


@pytest.mark.parametrize("old, new, field", [
    ("switching_time_ms: 25", "switching_time_ms: .inf", "ocs.switching_time_ms"),
    ("insertion_loss_db: 1.0", "insertion_loss_db: .inf", "ocs.insertion_loss_db"),
    ("insertion_loss_db: 1.0", "insertion_loss_db: .nan", "ocs.insertion_loss_db"),
    ("speed_gbps: 100", "speed_gbps: .inf", "hosts[0].nics[0].speed_gbps"),
    ("nvlink_gbps: 1840", "nvlink_gbps: .NaN", "hosts[0].gpus.nvlink_gbps"),
])
def test_an_infinite_or_nan_float_is_refused_at_its_line(tmp_path, old, new, field):
    p, line = _mutate(tmp_path, old, new)
    with pytest.raises(ConfigError) as e:
        load_inventory(p, cached=False)
    assert str(e.value) == f"{p}:{line}: {field}: Input should be a finite number"
    assert e.value.exit_code == ExitCode.CONFIG


def test_inventory_validate_refuses_an_infinite_switching_time(tmp_path, cli_env):
    p, line = _mutate(tmp_path, "switching_time_ms: 25", "switching_time_ms: .inf")
    r = subprocess.run(mfctl_cmd("inventory", "validate", p), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 3
    assert f"{p}:{line}: ocs.switching_time_ms: Input should be a finite number" in r.stderr
