"""``mfctl parse`` (issue 19): any registered parser by name or recognised from the text, a file or
stdin, a table or ``--json``; a ParseError exits 3 naming tool, line and expectation."""

from __future__ import annotations

import json
import subprocess

import pytest

from mfctl.hosts import registry
from support import DATA, GOLDEN, mfctl_cmd

TABLE = DATA / "nvidia-smi" / "h100x8-default-table-drv550.txt"


def run(*args, env, stdin: bytes | None = None):
    r = subprocess.run(mfctl_cmd("parse", *args), input=stdin, capture_output=True, env=env, timeout=60)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_a_named_kind_on_a_file_gives_json_with_schema(cli_env):
    rc, out, err = run("nvidia-smi", str(TABLE), "--json", env=cli_env)
    doc = json.loads(out)
    assert rc == 0 and err == ""
    assert (doc["schema"], doc["kind"], doc["detected"], doc["command"]) == ("mfctl.parse/v1", "nvidia-smi", False,
                                                                             "nvidia-smi")
    assert [g["bus_id"] for g in doc["data"]["gpus"]][:2] == ["00000000:19:00.0", "00000000:3B:00.0"]
    assert doc["data"]["gpus"][0]["power_cap_w"] == 700.0 and doc["data"]["driver_version"] == "550.90.07"


def test_without_a_kind_it_recognises_the_tool_and_says_which(cli_env):
    rc, out, err = run(str(TABLE), env=cli_env)
    assert rc == 0 and "note: recognised as nvidia-smi (nvidia-smi)" in err
    assert "NVIDIA H100 80GB HBM3" in out and "00000000:DB:00.0" in out  # the table on stdout
    rc, out, _ = run(str(DATA / "mellanox" / "ibstat-h100-cx7-ib-cx6dx-eth-some-down.txt"), "--json", env=cli_env)
    doc = json.loads(out)
    assert rc == 0 and (doc["kind"], doc["detected"]) == ("ibstat", True) and doc["candidates"][0] == "ibstat"
    assert {p["device"]: p["state"] for p in doc["data"]["ports"]}["mlx5_2"] == "Down"


def test_stdin_with_a_bom_and_crlf_as_windows_saves_a_paste(cli_env):
    text = (DATA / "mellanox" / "mlxconfig-q-cx7-osfp-ndr-truncated.txt").read_bytes()
    rc, out, err = run("-", "--json", env=cli_env, stdin=b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n"))
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "mlxconfig", err
    rc2, out2, _ = run("mlxconfig", "--json", env=cli_env, stdin=text)
    assert rc2 == 0 and json.loads(out2)["data"] == doc["data"]


def test_a_parse_error_exits_3_naming_tool_line_and_expectation(cli_env):
    cut = (GOLDEN / "ibv_devinfo" / "documented-format-two-hcas" / "output.txt").read_text().split("\n")[:10]
    rc, out, err = run("ibv_devinfo", "-", env=cli_env, stdin="\n".join(cut).encode())
    assert rc == 3 and out == ""
    assert err.startswith("error: ibv_devinfo: output line 10: expected 1 'port: N' block(s) in mlx5_1")
    rc, out, _ = run("ibv_devinfo", "-", "--json", env=cli_env, stdin="\n".join(cut).encode())
    e = json.loads(out)["error"]
    assert rc == 3 and (e["type"], e["exit_code"], e["tool"], e["line"], e["kind"]) == ("ParseError", 3, "ibv_devinfo",
                                                                                      10, "ibv_devinfo")
    assert "port: N" in e["expected"] and e["got"] == "hca_id: mlx5_1"


def test_text_no_parser_recognises_exits_3(cli_env):
    rc, out, err = run("-", env=cli_env, stdin=b"hello world\n")
    assert rc == 3 and "expected the output of a known tool (name its kind: mfctl parse --list)" in err
    rc, out, err = run("-", env=cli_env, stdin=b"")
    assert rc == 3 and "mfctl parse" in err and "Traceback" not in err


def test_list_names_every_registered_kind(cli_env):
    rc, out, _ = run("--list", "--json", env=cli_env)
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "mfctl.parse.kinds/v1"
    assert [k["kind"] for k in doc["kinds"]] == registry.names()
    assert {"nvidia-smi", "nvidia-smi-query-gpu", "ibv_devinfo", "ip-j-link"} <= set(registry.names())
    q = next(k for k in doc["kinds"] if k["kind"] == "nvidia-smi-query-gpu")
    assert q["options"] == ["fields"] and "590.48.01" in q["versions"]
    rc, out, _ = run("--list", env=cli_env)
    assert rc == 0 and "nvidia-smi-topo-m" in out and "versions covered" in out


def test_fields_for_noheader_csv_and_from_the_command_line(cli_env):
    rc, out, _ = run("--fields", "index,name,memory.total", "--json", env=cli_env, stdin=b"0, NVIDIA GB10, [N/A]\n")
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "nvidia-smi-query-gpu"
    assert doc["data"] == [{"index": 0, "name": "NVIDIA GB10", "memory.total": None}]
    rc, out, _ = run("nvidia-smi-query-gpu", "--fields", "nvidia-smi --query-gpu=fan.speed --format=csv,noheader,nounits",
                     "--json", env=cli_env, stdin=b"39\n")
    assert rc == 0 and json.loads(out)["data"] == [{"fan.speed": 39}]
    rc, _, err = run("ibstat", "--fields", "index", env=cli_env, stdin=b"x")
    assert rc == 2 and "--fields is for nvidia-smi-query-gpu, not ibstat" in err


@pytest.mark.parametrize("args, msg", [
    (("nope", "file"), "no parser kind 'nope'; mfctl parse --list names the"),
    (("nvidia-sm", "file"), "no parser kind 'nvidia-sm'; did you mean nvidia-smi"),
    (("ibstat", "a", "b"), "at most KIND and FILE, got 3 words"),
])
def test_usage_errors_exit_2(args, msg, cli_env):
    rc, _, err = run(*args, env=cli_env)
    assert rc == 2 and msg in err


def test_a_file_that_cannot_be_read_exits_3_as_every_unreadable_file(cli_env):
    rc, _, err = run("/nonexistent/capture.txt", env=cli_env)
    assert rc == 3 and "/nonexistent/capture.txt: No such file or directory" in err


def test_a_terminal_table_escapes_markup_in_the_text(cli_env, tmp_path):
    p = tmp_path / "gids.txt"
    p.write_text("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
                 "mlx5_0\t1\t0\tfe80:0000:0000:0000:0000:0000:0000:0001\t\t\tv1\t[bold]x[/bold]\n")
    rc, out, _ = run("show_gids", str(p), env=cli_env)
    assert rc == 0 and "[bold]x[/bold]" in out
