"""``mfctl simulate --reproduce-paper`` uses the paper's own setup: an option it would ignore (``--gpus``,
``--fabric``, …) is a usage error naming it, not silently dropped (the trial of issue 21)."""

import json
import subprocess

from support import mfctl_cmd


def test_an_option_reproduce_would_ignore_is_a_usage_error(cli_env):
    r = subprocess.run(mfctl_cmd("simulate", "--reproduce-paper", "--gpus", "64", "-f", "mfabric", "--json"),
                       capture_output=True, text=True, env=cli_env, timeout=60)
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["message"] == "--reproduce-paper uses the paper's own setup: it takes no --gpus, --fabric (only --plot " \
                             "and --json)"
