"""mfctl inventory validate|show in process (CliRunner)."""

import json

from typer.testing import CliRunner

from mfctl.cli.app import build
from support import PROTOTYPE


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


def test_validate_the_prototype(monkeypatch):
    r = invoke("inventory", "validate", PROTOTYPE, "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["valid"] is True and out["schema"] == "mfctl.inventory.validate/v1"
    assert (out["hosts"], out["gpus"], out["ocs_lanes"]) == (4, 32, 12)
    assert out["regions"] == {"region0": ["gpu01", "gpu02", "gpu03", "gpu04"]}
    monkeypatch.setenv("MFCTL_INVENTORY", str(PROTOTYPE))  # the argument's variable
    r = invoke("inventory", "validate", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["path"] == str(PROTOTYPE)


def test_an_invalid_inventory_is_exit_3_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROTOTYPE.read_text().replace("hosts:", "hostz:", 1))
    r = invoke("inventory", "validate", bad, "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 3 and err["type"] == "ConfigError" and str(bad) in err["message"]
    r = invoke("inventory", "validate", bad)
    assert r.exit_code == 3 and r.stdout == "" and r.stderr.startswith(f"error: {bad}")
    assert invoke("inventory", "validate").exit_code == 2  # no file, no variable
