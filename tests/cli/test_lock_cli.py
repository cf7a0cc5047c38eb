"""``mfctl lock status|acquire|release|renew|wait`` through the CLI (exit codes and messages), and
every locking command's refusal naming who holds the testbed lock (issue 17 item 13): text and
``--json``, exit 5, one format."""

import json
import subprocess

import pytest

from support import PROTOTYPE, ROOT, mfctl_cmd

INV = str(PROTOTYPE)


def run(env, *args, timeout=60):
    return subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def test_status_acquire_renew_release_a_lease_for_a_script(cli_env):
    r = run(cli_env, "lock", "status", "-i", INV)
    assert r.returncode == 0 and "testbed 'mfabric-prototype' (file " in r.stdout and r.stdout.rstrip().endswith("free")
    env = {**cli_env, "GITLAB_CI": "true", "CI_JOB_ID": "991", "CI_PIPELINE_ID": "77"}
    r = run(env, "lock", "acquire", "-i", INV, "--ttl", "60", "--reason", "soak test of gpu03")
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert len(token) >= 40 and "\n" not in token and "locked for 60 s" in r.stderr and token not in r.stderr
    r = run(cli_env, "lock", "status", "-i", INV)
    assert r.returncode == 0 and "held" in r.stdout and token not in r.stdout
    for want in ("reason   soak test of gpu03", "CI job   system gitlab-ci run 77 job 991", "(detached: mfctl lock acquire)",
                 "command  mfctl lock acquire -i", "s left)"):
        assert want in r.stdout, (want, r.stdout)
    st = json.loads(run(cli_env, "lock", "status", "-i", INV, "--json").stdout)
    assert st["schema"] == "mfctl.lock.status/v1" and st["state"] == "held" and not st["available"]
    assert st["holder"]["ci"] == {"system": "gitlab-ci", "run": "77", "job": "991"} and 30 < st["expires_in_s"] <= 60
    assert token not in json.dumps(st)

    r = run(cli_env, "lock", "acquire", "-i", INV, "--ttl", "5")  # held: refused, naming the holder
    assert r.returncode == 5 and "testbed 'mfabric-prototype' is locked by pid" in r.stderr and "soak test of gpu03" in r.stderr
    r = run({**cli_env, "MFCTL_LOCK_TOKEN": "bogus"}, "lock", "release", "-i", INV)  # held, by another token
    assert r.returncode == 5 and "(it is held by another token: testbed 'mfabric-prototype' is locked by pid" in r.stderr
    assert "soak test of gpu03" in r.stderr and token not in r.stderr
    r = run({**cli_env, "MFCTL_LOCK_TOKEN": token}, "lock", "renew", "-i", INV, "--ttl", "120", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ttl_s"] == 120
    assert json.loads(run(cli_env, "lock", "status", "-i", INV, "--json").stdout)["expires_in_s"] > 100
    r = run({**cli_env, "MFCTL_LOCK_TOKEN": token}, "lock", "release", "-i", INV)
    assert r.returncode == 0 and r.stdout.strip() == "testbed 'mfabric-prototype': released"
    r = run({**cli_env, "MFCTL_LOCK_TOKEN": token}, "lock", "release", "-i", INV, "--json")
    assert r.returncode == 5 and "holds no lock" in json.loads(r.stdout)["error"]["message"]
    r = run({**cli_env, "MFCTL_LOCK_TOKEN": token}, "lock", "renew", "-i", INV)
    assert r.returncode == 5 and "no longer held" in r.stderr
    r = run(cli_env, "lock", "release", "-i", INV)
    assert r.returncode == 2 and "needs the token (MFCTL_LOCK_TOKEN or --token-file), or --force" in r.stderr
    r = run(cli_env, "lock", "release", "-i", INV, "--token", "x")  # never on a command line
    assert r.returncode == 2 and "No such option: --token" in r.stderr
    r = run(cli_env, "lock", "acquire", "-i", INV, "--ttl", "60")
    f = ROOT / cli_env["MFCTL_LOG_FILE"]
    tf = f.with_name("token.txt")
    tf.write_text(r.stdout)
    r = run(cli_env, "lock", "release", "-i", INV, "--token-file", tf)
    assert r.returncode == 0 and r.stdout.strip() == "testbed 'mfabric-prototype': released"
    log = (ROOT / cli_env["MFCTL_LOG_FILE"]).read_text() if (ROOT / cli_env["MFCTL_LOG_FILE"]).exists() else ""
    assert token not in log


def test_release_by_force_asks_and_wait_times_out_naming_the_holder(cli_env):
    r = run(cli_env, "lock", "acquire", "-i", INV, "--ttl", "60", "--json")
    acq = json.loads(r.stdout)
    assert r.returncode == 0 and acq["schema"] == "mfctl.lock.acquire/v1" and acq["token"] and acq["holder"]["detached"]
    r = run(cli_env, "lock", "wait", "-i", INV, "--timeout", "0.5")
    assert r.returncode == 5 and "is locked by pid" in r.stderr and "(waited 0." in r.stderr
    r = run(cli_env, "lock", "release", "-i", INV, "--force")  # no terminal, no --yes: refused
    assert r.returncode == 2 and "confirm with --yes" in r.stderr
    r = run(cli_env, "lock", "release", "-i", INV, "--force", "--yes", "--json")
    rel = json.loads(r.stdout)
    assert r.returncode == 0 and rel["released"] and rel["forced"] and rel["holder"]["token_id"] == acq["token_id"]
    r = run(cli_env, "lock", "wait", "-i", INV, "--timeout", "5", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["free"] is True
    r = run(cli_env, "lock", "release", "-i", INV, "--force", "--yes")
    assert r.returncode == 0 and "not locked" in r.stdout


@pytest.fixture
def held(cli_env):
    """The prototype's testbed lock held by a script (mfctl lock acquire); its token."""
    r = run(cli_env, "lock", "acquire", "-i", INV, "--ttl", "120", "--reason", "someone's firmware soak")
    assert r.returncode == 0, r.stderr
    yield r.stdout.strip()
    run({**cli_env, "MFCTL_LOCK_TOKEN": r.stdout.strip()}, "lock", "release", "-i", INV)


def _says_who(text: str) -> None:
    assert "testbed 'mfabric-prototype' is locked by pid " in text
    assert "for 'held by a script (mfctl lock acquire)' since 20" in text and "reason \"someone's firmware soak\"" in text
    assert "user " in text and "lease until" in text


@pytest.mark.parametrize("cmd", [
    ["ocs", "connect", "-i", INV, "1", "385", "--yes"],
    ["ocs", "disconnect", "-i", INV, "1", "--yes"],
    ["ocs", "apply", str(ROOT / "examples" / "topology.yaml"), "-i", INV, "--yes"],
    ["ocs", "recover", "-i", INV, "--yes"],
])
def test_ocs_changes_are_refused_naming_the_holder(cli_env, held, cmd):
    if cmd[1] == "apply" and not (ROOT / "examples" / "topology.yaml").exists():
        cmd = ["ocs", "connect", "-i", INV, "2", "386", "--yes"]
    r = run(cli_env, *cmd)
    assert r.returncode == 5, r.stderr
    _says_who(r.stderr)
    r = run(cli_env, *cmd, "--json")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 5 and err["exit_code"] == 5 and err["holder"]["reason"] == "someone's firmware soak"
    _says_who(err["message"])
    assert held not in r.stdout + r.stderr


def test_a_token_lets_the_holders_own_commands_through(cli_env, held):
    # (a password, as a switch's: an unset one is refused before anything is connected, exit 3)
    env = {**cli_env, "MFCTL_LOCK_TOKEN": held, "MFCTL_CONNECT_TIMEOUT": "0.3", "MFCTL_OCS_PASSWORD": "pw-not-sent"}
    r = run(env, "ocs", "connect", "-i", INV, "1", "385", "--yes")
    assert r.returncode == 4 and "no transport reachable" in r.stderr  # past the lock, to the (absent) OCS


def test_mfctl_run_is_refused_naming_the_holder(cli_env, held):
    pb = ROOT / "tests" / "data" / "playbooks" / "short.yaml"
    r = run(cli_env, "run", pb, "-i", INV, "--json", timeout=120)
    s = json.loads(r.stdout)
    assert r.returncode == 5 and s["exit_code"] == 5 and s["run_dir"] == ""
    _says_who(s["error"])


def test_provision_apply_is_refused_naming_the_holder(cli_env, mock_testbed):
    inv = mock_testbed.inventory
    r = run(cli_env, "lock", "acquire", "-i", inv, "--ttl", "120", "--reason", "someone's firmware soak")
    assert r.returncode == 0
    token = r.stdout.strip()
    try:
        r = run(cli_env, "provision", "apply", str(ROOT / "playbooks" / "provision.yaml"), "-i", inv, "--yes", "--json",
                timeout=120)
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 5 and "is locked by pid" in err["message"] and "someone's firmware soak" in err["message"]
        assert err["holder"]["purpose"] == "held by a script (mfctl lock acquire)"
    finally:
        run({**cli_env, "MFCTL_LOCK_TOKEN": token}, "lock", "release", "-i", inv)
