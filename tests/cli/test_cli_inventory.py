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


def test_every_problem_is_listed_a_misspelled_key_is_named_and_a_bad_ipv4_refused(tmp_path):
    """issue 17 item 14: all problems in text and --json (not "(and 16 more)"), the misspelled key
    before the "Field required" it causes, an unclosed quote pointed at, 192.0.2.999 refused."""
    text = PROTOTYPE.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("address: 192.0.2.11,", "address: 192.0.2.999,", 1)
                   .replace("nvlink_gbps", "nvlnk_gbps", 1).replace("speed_gbps: 100\n", "speed_gbps: -1\n", 1))
    r = invoke("inventory", "validate", bad, "--json")
    probs = json.loads(r.stdout)["error"]["problems"]
    assert r.exit_code == 3 and [p["message"] for p in probs] == [
        "hosts[0].gpus.nvlnk_gbps: unknown key 'nvlnk_gbps' (did you mean 'nvlink_gbps'?)",
        "hosts[0].ssh.address: '192.0.2.999' is not an IPv4 address (four numbers 0-255) nor a host name",
        "hosts[0].nics[0].speed_gbps: Input should be greater than 0"]
    lines = {p["line"] for p in probs}
    assert all(p["path"] == str(bad) for p in probs) and len(lines) == 3
    r = invoke("inventory", "validate", bad)
    err = r.stderr.splitlines()
    assert len(err) == 3 and err[0].endswith("(did you mean 'nvlink_gbps'?) (2 more problem(s) below)")
    assert "'192.0.2.999' is not an IPv4 address" in err[1] and err[2].strip().startswith(f"{bad}:")
    quote = tmp_path / "quote.yaml"
    quote.write_text(text.replace("name: mfabric-prototype\n", 'name: "mfabric-prototype\n', 1))
    r = invoke("inventory", "validate", quote)
    assert r.exit_code == 3 and "(an unclosed quote on line 7?)" in r.stderr


def test_a_misspelled_playbook_section_is_named_not_hidden_behind_field_required(tmp_path):
    from support import DATA

    pb = tmp_path / "pb.yaml"
    pb.write_text((DATA / "playbooks" / "short.yaml").read_text().replace("training:", "trainig:", 1)
                  .replace("../../../inventory", str(PROTOTYPE.parent)))
    r = invoke("run", pb, "--dry-run")
    assert r.exit_code == 3 and f"{pb}:7: trainig: unknown key 'trainig' (did you mean 'training'?)" in r.stderr
    assert "Field required" not in r.stderr
