"""Inventory validation: good file loads; bad files get file:line and exit code 3."""

import subprocess
import textwrap
from pathlib import Path

import pytest

from mfctl.errors import ConfigError
from mfctl.inventory import Inventory, load_inventory
from support import PROTOTYPE, mfctl_cmd


def test_prototype_describes_the_paper_testbed():
    inv = load_inventory(PROTOTYPE)
    assert len(inv.hosts) == 4 and all(h.gpus.count == 8 for h in inv.hosts)
    for h in inv.hosts:
        assert [n.role for n in h.nics] == ["ocs", "ocs", "ocs", "eps"]
        assert all(n.speed_gbps == 100 and n.model.startswith("ConnectX-6") for n in h.nics)
    assert inv.ocs.size.inputs == 384 and inv.eps.model == "NVIDIA Spectrum SN3700"
    assert inv.regions[0].hosts == ["gpu01", "gpu02", "gpu03", "gpu04"]
    lanes = [lane for h in inv.hosts for _, lane in h.ocs_lanes()]
    assert len(lanes) == 12 and len({lane.ocs_tx for lane in lanes}) == 12


def _write(tmp_path, text):
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def _mutate(tmp_path, old, new, count=1):
    src = PROTOTYPE.read_text()
    assert old in src
    p = tmp_path / "bad.yaml"
    p.write_text(src.replace(old, new, count))
    return p


def _line_of(path, needle, nth=1):
    seen = 0
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if needle in ln:
            seen += 1
            if seen == nth:
                return i
    raise AssertionError(needle)


@pytest.mark.usefixtures("yaml_loader")
@pytest.mark.parametrize("old,new,needle,nth,msg", [
    ("  port_speed_gbps: 200", "  port_speed_gbps: 200\n  colour: blue", "colour:", 1, "unknown key 'colour'"),
    ("  ports: 32", "  ports: 32\n  ports: 64", "ports: 64", 1, "duplicate key 'ports'"),
    ("ocs_tx: 4,", "ocs_tx: 1,", "ocs_tx: 1,", 2, "OCS port 1 used twice"),
    ("{index: 0, netdev: ens1f0np0, ocs_tx: 1, ocs_rx: 385}", "{index: 0, netdev: ens1f0np0, ocs_rx: 385}",
     "netdev: ens1f0np0, ocs_rx: 385", 1, "has no ocs_tx port"),
    ("ocs_rx: 385}", "ocs_rx: 999}", "ocs_rx: 999", 1, "beyond the OCS output ports 385..768"),
    ("hosts: [gpu01, gpu02, gpu03, gpu04]", "hosts: [gpu01, gpu02, gpu03, gpu09]", "hosts: [gpu01", 1, "missing host 'gpu09'"),
])
def test_bad_inventory_names_file_and_line(tmp_path, old, new, needle, nth, msg):
    p = _mutate(tmp_path, old, new)
    with pytest.raises(ConfigError) as e:
        load_inventory(p)
    line = _line_of(p, needle, nth)
    assert msg in str(e.value)
    assert f"{p}:{line}:" in str(e.value), (str(e.value), line)
    assert e.value.exit_code == 3


@pytest.mark.usefixtures("yaml_loader")
def test_yaml_syntax_error_has_a_line(tmp_path):
    p = _write(tmp_path, "name: x\nhosts: [\n  - a: b\n")
    with pytest.raises(ConfigError) as e:
        load_inventory(p)
    assert str(p) in str(e.value) and e.value.line is not None


@pytest.mark.usefixtures("yaml_loader")
def test_cli_exit_code_3_and_json(tmp_path, cli_env):
    p = _mutate(tmp_path, "  ports: 32", "  ports: 32\n  ports: 64")
    r = subprocess.run(mfctl_cmd("inventory", "validate", p), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 3 and "duplicate key 'ports'" in r.stderr and f"bad.yaml:{_line_of(p, 'ports: 64')}" in r.stderr
    r = subprocess.run(mfctl_cmd("inventory", "validate", PROTOTYPE, "--json"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 0 and '"valid": true' in r.stdout and '"gpus": 32' in r.stdout
    r = subprocess.run(mfctl_cmd("inventory", "validate", tmp_path / "missing.yaml", "--json"), capture_output=True,
                       text=True, env=cli_env)
    assert r.returncode == 3 and '"exit_code": 3' in r.stdout


@pytest.mark.usefixtures("yaml_loader")
@pytest.mark.parametrize("content,msg", [
    (b"\x7fELF\x02\x01\xd0\x00", "not UTF-8 text"),
    (b"name: x\x00\n", "contains NUL bytes"),
    (b"name: x\nport: !!python/object/apply:os.system ['echo hi']\n", "could not determine a constructor"),
    (b"- a\n- b\n", "must be a YAML mapping"),
    (b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
     b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
     r"x\.yaml:6: document too large: its YAML aliases expand to more than 200000 nodes"),
])
def test_hostile_files_get_a_config_error(tmp_path, content, msg):
    p = tmp_path / "x.yaml"
    p.write_bytes(content)
    with pytest.raises(ConfigError, match=msg) as e:
        load_inventory(p)
    assert e.value.exit_code == 3


@pytest.mark.parametrize("old,new,msg", [
    ("port: 22, user: mfabric", "port: true, user: mfabric", "hosts[0].ssh.port"),
    ("address: 192.0.2.11,", "address: 'x; rm -rf /',", "neither an IP address nor a host name"),
    ('pci: "0000:0c:00.0"', 'pci: "zzz"', "pci"),
    ("{kind: tcp, address: 192.0.2.50, port: 3082}", "{kind: pigeon}", "unknown kind 'pigeon'"),
    ("name: gpu01", "name: gpu 01 $(reboot)", "hosts[0].name"),
])
def test_bad_values_are_refused(tmp_path, old, new, msg):
    with pytest.raises(ConfigError) as e:
        load_inventory(_mutate(tmp_path, old, new))
    assert msg in str(e.value)


def _cache_entries(tmp_path):
    return sorted((tmp_path / "state" / "inventory-cache").glob("*.json"))


def test_cache_returns_the_same_inventory_without_parsing_yaml_and_misses_on_any_edit(tmp_path, monkeypatch):
    import mfctl.inventory.loader as loader

    p = tmp_path / "inv.yaml"
    p.write_text(PROTOTYPE.read_text())
    first = load_inventory(p)
    assert len(_cache_entries(tmp_path)) == 1
    real_parse = loader.load_yaml_with_lines
    monkeypatch.setattr(loader, "load_yaml_with_lines", lambda *a, **k: pytest.fail("YAML parsed on a cache hit"))
    second = load_inventory(p)
    assert second == first and second is not first and second.source == str(p.resolve())
    assert second.hosts[2].ssh.port == first.hosts[2].ssh.port and second.base_dir == tmp_path
    monkeypatch.setattr(loader, "load_yaml_with_lines", real_parse)
    # one byte changed → parsed and checked again: an error is never hidden by an older good entry
    p.write_text(PROTOTYPE.read_text().replace("ocs_tx: 4,", "ocs_tx: 1,", 1))
    with pytest.raises(ConfigError, match="OCS port 1 used twice"):
        load_inventory(p)
    assert len(_cache_entries(tmp_path)) == 1  # an invalid file is never cached


def test_cache_entries_that_are_damaged_edited_or_fail_the_cross_checks_are_not_trusted(tmp_path, caplog, cli_env):
    import json

    from mfctl.inventory import cache

    p = tmp_path / "inv.yaml"
    p.write_text(PROTOTYPE.read_text())
    good = load_inventory(p)
    [entry] = _cache_entries(tmp_path)
    k = entry.stem
    head, body = entry.read_bytes().split(b"\n", 1)
    assert head == cache._checksum(k, body) and Inventory.model_validate_json(body).model_dump() == good.model_dump()
    entry.write_bytes(head + b"\n" + body[:100])  # truncated
    assert load_inventory(p) == good and "damaged inventory cache entry" in caplog.text
    import os
    entry.unlink()
    os.mkfifo(entry)  # planted: a FIFO would block a reader forever
    assert load_inventory(p) == good
    # hand-edited: gpu01 pointed at gpu02's port, still a valid inventory, but the checksum no longer matches
    doc = good.model_dump(mode="json")
    doc["hosts"][0]["ssh"]["port"] = doc["hosts"][1]["ssh"]["port"]
    entry.write_bytes(head + b"\n" + json.dumps(doc).encode())
    assert load_inventory(p) == good
    # an entry with a right checksum that fails the cross-checks (two lanes on one OCS port): the file decides
    doc = good.model_dump(mode="json")
    doc["hosts"][0]["nics"][1]["lanes"][0]["ocs_tx"] = doc["hosts"][0]["nics"][0]["lanes"][0]["ocs_tx"]
    body = json.dumps(doc).encode()
    entry.write_bytes(cache._checksum(k, body) + b"\n" + body)
    assert Inventory.model_validate_json(body).hosts[0].nics[1].lanes[0].ocs_tx == 1
    assert load_inventory(p) == good
    assert Inventory.model_validate_json(entry.read_bytes().split(b"\n", 1)[1]).model_dump() == good.model_dump()  # rewritten
    # inventory validate reads the file itself, whatever the cache holds
    doc["hosts"][0]["nics"][1]["lanes"][0]["ocs_tx"] = 2
    doc["hosts"][0]["gpus"]["count"] = 2
    body = json.dumps(doc).encode()
    entry.write_bytes(cache._checksum(k, body) + b"\n" + body)
    assert load_inventory(p).hosts[0].gpus.count == 2  # (a forged entry is the state dir's owner's doing)
    r = subprocess.run(mfctl_cmd("inventory", "validate", p, "--json"), capture_output=True, text=True,
                       env={**cli_env, "MFCTL_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 0 and json.loads(r.stdout)["gpus"] == 32
    assert load_inventory(p) == good  # and validate refreshed the entry


def test_a_broken_state_dir_or_log_file_is_one_line_not_a_traceback(tmp_path, cli_env):
    (tmp_path / "afile").write_text("")
    env = {**cli_env, "MFCTL_STATE_DIR": str(tmp_path / "afile")}
    env.pop("MFCTL_LOG_FILE")
    r = subprocess.run(mfctl_cmd("mock", "up"), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "error: state directory " + str(tmp_path / "afile") + " (MFCTL_STATE_DIR) is not a directory" in r.stderr
    r = subprocess.run(mfctl_cmd("inventory", "validate", PROTOTYPE), capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "valid" in r.stdout and "warning: no log file" in r.stderr  # it needs no state
    (tmp_path / "logdir").mkdir()
    r = subprocess.run(mfctl_cmd("inventory", "validate", PROTOTYPE), capture_output=True, text=True,
                       env={**cli_env, "MFCTL_LOG_FILE": str(tmp_path / "logdir")})
    assert r.returncode == 0 and f"warning: no log file: {tmp_path / 'logdir'}: Is a directory" in r.stderr


def test_an_empty_setting_is_unset_and_a_question_creates_nothing(tmp_path, cli_env, monkeypatch):
    from mfctl import settings

    monkeypatch.setenv("MFCTL_STATE_DIR", "")
    monkeypatch.setenv("MFCTL_FANOUT", "")
    assert settings.state_path() == Path("~/.local/state/mfctl").expanduser() and settings.get_int("fanout") == 32
    env = {**cli_env, "MFCTL_STATE_DIR": str(tmp_path / "not-yet")}
    r = subprocess.run(mfctl_cmd("mock", "status"), capture_output=True, text=True, env=env)
    assert r.returncode == 1 and r.stdout == "not running\n" and not (tmp_path / "not-yet").exists()


def test_cache_that_cannot_be_written_costs_only_time_and_keeps_a_bounded_number_of_entries(tmp_path, monkeypatch):
    from mfctl.inventory import cache

    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "inventory-cache").write_text("not a directory")
    assert load_inventory(PROTOTYPE).name == "mfabric-prototype"
    (tmp_path / "state" / "inventory-cache").unlink()
    monkeypatch.setattr(cache, "KEEP", 2)
    for i in range(4):
        p = tmp_path / f"inv{i}.yaml"
        p.write_text(PROTOTYPE.read_text().replace("description:", f"# copy {i}\ndescription:", 1))
        load_inventory(p)
    assert len(_cache_entries(tmp_path)) == 2


def test_both_yaml_loaders_give_the_same_data_and_lines(monkeypatch):
    """libyaml's CSafeLoader and the pure SafeLoader (setting yaml_loader) read the repository's
    inventories, playbooks and recipes to the same data, types and key lines; a bad setting is
    exit 3 naming the variable."""
    import yaml

    from mfctl.inventory import loader

    if not yaml.__with_libyaml__:
        pytest.skip("this PyYAML was built without libyaml")
    root = PROTOTYPE.parent.parent
    files = sorted([*root.glob("inventory/*.yaml"), *root.glob("playbooks/*.yaml"), *root.glob("examples/**/*.yaml")])
    assert len(files) > 10
    got = {}
    for kind in ("libyaml", "pure"):
        monkeypatch.setenv("MFCTL_YAML_LOADER", kind)
        assert loader.loader_kind() == kind
        got[kind] = [loader.load_yaml_with_lines(f) for f in files]
    for f, (d1, l1), (d2, l2) in zip(files, got["libyaml"], got["pure"]):
        assert repr(d1) == repr(d2) and l1 == l2, f  # (repr: the types too, 1 vs 1.0 vs True)
    monkeypatch.setenv("MFCTL_YAML_LOADER", "auto")
    assert loader.loader_kind() == "libyaml"
    monkeypatch.setenv("MFCTL_YAML_LOADER", "fast")
    with pytest.raises(ConfigError, match="MFCTL_YAML_LOADER='fast': one of auto, libyaml, pure") as e:
        loader.load_yaml_with_lines(PROTOTYPE)
    assert e.value.exit_code == 3


@pytest.mark.usefixtures("yaml_loader")
def test_nesting_past_100_levels_names_its_line_with_either_loader(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("name: x\nhosts:\n  - " + "[" * 150 + "]" * 150 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml:3: nested more than 100 levels deep"):
        load_inventory(p)
    p.write_text("a: 1\n" + "".join(" " * i + f"k{i}:\n" for i in range(120)) + " " * 120 + "v: 1\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml:102: nested more than 100 levels deep"):
        load_inventory(p)
