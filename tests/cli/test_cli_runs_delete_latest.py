"""``mfctl runs delete latest``: the newest run that has ended, as ``runs show latest`` means it."""

import json
import subprocess

from support import DATA, mfctl_cmd

LOG = DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt"


def _run(env, *args):
    return subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_delete_latest_deletes_the_newest_ended_run_only(tmp_path, cli_env):
    first = json.loads(_run(cli_env, "runs", "import-log", LOG, "--json").stdout)["run_id"]
    second = json.loads(_run(cli_env, "runs", "import-log", LOG, "--force", "--json").stdout)["run_id"]
    assert first != second
    shown = json.loads(_run(cli_env, "runs", "show", "latest", "--json").stdout)
    assert shown["run_id"] == second
    r = _run(cli_env, "runs", "delete", "latest", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["deleted"] == [second]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [first]
    # latest and its id given together: deleted once
    r = _run(cli_env, "runs", "delete", "latest", first, "--yes", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["deleted"] == [first]
    r = _run(cli_env, "runs", "delete", "latest", "--yes")
    assert r.returncode == 2 and "no runs in" in r.stderr
