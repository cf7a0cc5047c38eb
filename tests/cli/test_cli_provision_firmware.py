"""Firmware that converges, on a factory mock whose cards differ as real ones do (issue 16 items 3,
7, 8, 9): an Ethernet-only ConnectX-4 Lx without LINK_TYPE_P1 and a Dell OEM ConnectX-6 Dx on gpu01,
a card whose mlxfwreset offers no level 3 on gpu02. A burn longer than the per-command timeout
succeeds under the burn timeout (and, with the burn timeout too short, is reported failed while the
mock completes it: burnt, reset pending); a downgrade is refused, then forced; a PSID mismatch and a
not-newer image are refused by the mock's mlxfwmanager; a reset brings the NIC's netdevs back fresh."""

import json
import os
import subprocess

import pytest
import yaml

from mfctl import mockctl
from mfctl.hosts import mellanox
from mfctl.mock.nics.firmware import BURN_S, mock_image_sha256
from support import PROTOTYPE, ROOT, mfctl_cmd, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"
# a mock burn takes BURN_S / 10 = 3.5 s of sleep: longer than the 2.5 s per-command timeout below whatever the
# load (a sleep only gets longer), while the ordinary commands keep 2.5 s (at 25 / 1 s the margins were 0.4 s
# and the 1 s: too narrow on 2 loaded cores); a reset is RESET_S / 10 = 1 s
TIME_SCALE = 10
COMMAND_TIMEOUT = 2.5
OLD = "/opt/firmware/fw-ConnectX6Dx-MT_0000000359-22_31_1014.bin"  # the factory version's image


@pytest.fixture
def mock(tmp_path_factory):
    """A factory mock of the test's own: the tests burn, reset and reboot its NICs, so a rerun (pyproject:
    --reruns 1) on a module's mock started where the failed attempt left it (gpu03's nic0 burnt: the rerun's
    'failure' was nic1's burn, the real one hidden). One start is ~2 s (13 s on a loaded machine)."""
    tmp = tmp_path_factory.mktemp("fwmock")
    env = dict(os.environ, MFCTL_STATE_DIR=str(tmp / "state"), MFCTL_RUNS_DIR=str(tmp / "runs"),
               MFCTL_LOG_FILE=str(tmp / "mfctl.log"), MFCTL_LOCK_DIR=str(tmp / "locks"))
    doc = yaml.safe_load(PROTOTYPE.read_text())
    doc["hosts"][0]["nics"][1]["model"] = "ConnectX-4 Lx"
    doc["hosts"][0]["nics"][2]["model"] = "ConnectX-6 Dx (Dell OEM)"
    doc["hosts"][1]["nics"][0]["model"] = "ConnectX-6 Dx (no PCI reset)"
    src = tmp / "inv.yaml"
    src.write_text(yaml.safe_dump(doc, sort_keys=False))
    mp = pytest.MonkeyPatch()
    mp.setenv("MFCTL_STATE_DIR", env["MFCTL_STATE_DIR"])
    st = mockctl.start(src, tmp / "mock", time_scale=TIME_SCALE, factory=True)
    env.update(MFCTL_COMMAND_TIMEOUT=str(COMMAND_TIMEOUT), COLUMNS="250")

    def run(*a, **extra):
        return subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=dict(env, **extra), timeout=180)

    yield st["inventory"], run
    mockctl.stop(tmp / "mock")
    mp.undo()


def _by_target(acts, phase):
    return {a["target"].split()[0]: a for a in acts if a["phase"] == phase}


@pytest.mark.timeout(400)  # 4 applies and 6 plans/checks on a factory mock: ~75 s alone on 2 loaded cores
def test_firmware_converges_on_cards_that_differ(mock, tmp_path):
    inv, run = mock
    assert BURN_S / TIME_SCALE >= COMMAND_TIMEOUT + 1.0  # the premise: a burn outlasts MFCTL_COMMAND_TIMEOUT
    r = run("firmware", "check", SPEC, "-i", inv, "--hosts", "gpu01", "--json")
    rows = {n["pci"]: n for n in json.loads(r.stdout)["nics"]}
    assert r.returncode == 6
    assert rows["0000:12:00.0"]["status"] == "no pinned image" and rows["0000:12:00.0"]["psid"] == "MT_2420110034"
    oem = rows["0000:8a:00.0"]
    assert oem["status"] == "no pinned image" and oem["psid"] == "DEL0000000027"
    assert oem["note"].startswith("no pinned image: PSID DEL0000000027 (0F6FXM_08P2T2_Ax) is an OEM PSID; the card "
                                  "refuses NVIDIA's images (MT_0000000359")  # (and any other MT_ image pinned)
    assert oem["note"].endswith("): pin the OEM's image for DEL0000000027")

    r = run("provision", "plan", SPEC, "-i", inv, "--hosts", "gpu01,gpu02", "--json")
    assert r.returncode == 6, r.stderr
    h1, h2 = (h["actions"] for h in json.loads(r.stdout)["hosts"])
    fw = _by_target(h1, "firmware")
    assert sorted(fw) == ["nic0", "nic1", "nic2", "nic3"]
    assert [fw[n]["outcome"] for n in ("nic0", "nic1", "nic2", "nic3")] == [None, "no pinned image", "no pinned image", None]
    assert fw["nic0"]["timeout_s"] == 900 and fw["nic0"]["progress"].startswith("burning firmware 22.39.1002 on nic0")
    [lt] = [a for a in h1 if a["what"] == "mlxconfig LINK_TYPE_P1"]
    assert lt["target"] == "nic1 (0000:12:00.0)" and lt["outcome"] == "not supported on this card" and lt["manual"] is None
    assert set(_by_target(h1, "firmware-reset")) == {"nic0", "nic3"}  # no image and nothing pending on nic1/nic2
    r2 = _by_target(h2, "firmware-reset")
    assert r2["nic0"]["outcome"] == "reboot required" and "`sudo systemctl reboot`" in r2["nic0"]["after"]
    assert r2["nic1"]["commands"] == ["mlxfwreset -y -d 0000:12:00.0 --level 3 reset"]

    # the burn timeout too short: reported failed, yet the mock's burn completes (burnt, reset pending)
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu03", "--yes", "--json", MFCTL_FIRMWARE_BURN_TIMEOUT="1")
    [h3] = json.loads(r.stdout)["hosts"]
    assert r.returncode == 1 and "timeout: command did not finish within 1 s" in h3["failed"]["error"]
    assert h3["failed"]["step"] == "firmware: firmware on nic0 (0000:0c:00.0)"
    wait_until(lambda: json.loads(run("firmware", "check", SPEC, "-i", inv, "--hosts", "gpu03", "--json").stdout)
               ["nics"][0]["status"] == "reset needed", what="the abandoned burn completed")

    # gpu01 converges: each burn outlasts the per-command timeout but not its own; the findings stay findings
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu01", "--yes", "--json")
    [h] = json.loads(r.stdout)["hosts"]
    assert r.returncode == 0 and h["ok"] and h["verified"] and h["left_after_verify"] == [], r.stdout + r.stderr
    assert not any(a["outcome"] for a in h["applied"])  # the findings were reported, not run, and are not drift
    rows = {n["pci"]: n for n in json.loads(run("firmware", "check", SPEC, "-i", inv, "--hosts", "gpu01", "--json")
                                            .stdout)["nics"]}
    assert [rows[p]["status"] for p in ("0000:0c:00.0", "0000:12:00.0", "0000:8a:00.0", "0000:90:00.0")] == \
        ["ok", "no pinned image", "no pinned image", "ok"]

    # the mock's mlxfwmanager as the real one: another PSID's image refused, a not-newer one skipped without --force
    ex = run("exec", "-i", inv, "gpu01", "--json", "--", "mlxfwmanager", "-u", "-y", "-d", "0000:12:00.0", "-i",
             "/opt/firmware/fw-ConnectX6Dx-MT_0000000359-22_39_1002.bin")
    [res] = json.loads(ex.stdout)["results"]
    assert res["rc"] == 1 and "Status:           No matching image found" in res["stdout"]
    ex = run("exec", "-i", inv, "gpu01", "--json", "--", "mlxfwmanager", "-u", "-y", "-d", "0000:0c:00.0", "-i", OLD)
    [res] = json.loads(ex.stdout)["results"]
    assert res["rc"] == 0 and "Status:           Up to date" in res["stdout"]
    [res] = json.loads(run("exec", "-i", inv, "gpu01", "--json", "--", "mlxfwmanager", "--query").stdout)["results"]
    nic0 = next(d for d in mellanox.parse_mlxfwmanager(res["stdout"]) if d.pci == "0000:0c:00.0")
    assert (nic0.fw_current, nic0.fw_running) == ("22.39.1002", None)  # nothing was burnt

    # a downgrade: refused (nothing touched) unless the manifest allows it, then burnt with --force
    man = yaml.safe_load((ROOT / "firmware" / "manifest.yaml").read_text())
    man["images"][0].update(version="22.31.1014", image=OLD, sha256=mock_image_sha256(OLD))
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(man))
    spec = yaml.safe_load(SPEC.read_text().replace("../", str(ROOT) + "/"))
    spec.update(inventory=str(inv), firmware_manifest=str(tmp_path / "manifest.yaml"))
    (tmp_path / "down.yaml").write_text(yaml.safe_dump(spec))
    r = run("provision", "apply", tmp_path / "down.yaml", "--hosts", "gpu01", "--yes", "--json")
    [h] = json.loads(r.stdout)["hosts"]
    assert r.returncode == 1 and h["applied"] == [] and "allow_downgrade: true" in h["failed"]["error"]
    man["images"][0]["allow_downgrade"] = True
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(man))
    r = run("provision", "plan", tmp_path / "down.yaml", "--hosts", "gpu01", "--json")
    fw = _by_target(json.loads(r.stdout)["hosts"][0]["actions"], "firmware")
    assert "--force" in fw["nic0"]["commands"][1] and fw["nic0"]["what"] == "firmware (downgrade, --force)"


    # a level-3 reset restarts the driver: MTU, address and QoS set before it are gone on every netdev of that
    # NIC (and only that NIC), so only a plan that re-reads after the reset converges
    # (a reset is not an ordinary command: an operator gives it time, as provisioning does firmware_reset_timeout)
    ex = run("exec", "-i", inv, "gpu01", "--json", "--timeout", "60", "--", "mlxfwreset", "-y", "-d", "0000:90:00.0",
             "--level", "3", "reset")
    [res] = json.loads(ex.stdout)["results"]
    assert res["rc"] == 0 and "3: Driver restart and PCI reset" in res["stdout"]
    r = run("provision", "plan", SPEC, "-i", inv, "--hosts", "gpu01", "--json")
    acts = [a for a in json.loads(r.stdout)["hosts"][0]["actions"] if a["outcome"] is None]
    assert r.returncode == 6 and {a["target"].split()[0] for a in acts if a["phase"] != "roce"} == {"ens4f0np0"}
    by_what = {a["what"]: a for a in acts}
    assert by_what["MTU"]["before"] == "1500" and by_what["address"]["before"] == "none"
    assert by_what["RoCE QoS"]["before"].startswith("trust pcp, PFC off")


@pytest.mark.timeout(300)  # its mock (13 s to start on a loaded machine) and one apply of 4 burns
def test_reboot_required_is_left_for_a_person_then_a_reboot_activates_it(mock):
    """gpu02's nic0 offers no reset level 3: apply burns it, resets the other NICs, never pretends for
    nic0 (exit 1, left after verify: the reboot, named); after the reboot the burnt firmware runs."""
    inv, run = mock
    r = run("provision", "apply", SPEC, "-i", inv, "--hosts", "gpu02", "--yes", "--json")
    [h] = json.loads(r.stdout)["hosts"]
    assert r.returncode == 1 and h["failed"] is None, r.stdout + r.stderr
    [left] = h["left_after_verify"]
    assert (left["target"], left["outcome"]) == ("nic0 (0000:0c:00.0)", "reboot required")
    assert "`sudo systemctl reboot`" in left["after"] and not any(a["outcome"] for a in h["applied"])
    rows = json.loads(run("firmware", "check", SPEC, "-i", inv, "--hosts", "gpu02", "--json").stdout)["nics"]
    assert [n["status"] for n in rows] == ["reset needed", "ok", "ok", "ok"]
    ex = run("exec", "-i", inv, "gpu02", "--", "systemctl", "reboot")
    assert ex.returncode == 0, ex.stdout + ex.stderr
    r = run("firmware", "check", SPEC, "-i", inv, "--hosts", "gpu02", "--json")
    assert r.returncode == 0 and [n["status"] for n in json.loads(r.stdout)["nics"]] == ["ok"] * 4
