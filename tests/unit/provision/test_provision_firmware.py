"""The firmware plan steps on a host's state read as the tools print it (issue 16 items 3, 7, 8, 9):
images by PSID exactly, downgrades, OEM PSIDs, mlxconfig ranges and parameters a card lacks, the
reset level from ``mlxfwreset query``, per-step timeouts through apply, outcomes that are not run."""

import pytest

from mfctl.errors import ConfigError, ExitCode
from mfctl.hosts import mellanox
from mfctl.inventory import load_inventory
from mfctl.provision import service
from mfctl.provision.actions import OUTCOME_NO_PIN, OUTCOME_REBOOT, OUTCOME_UNSUPPORTED, HostActual, PlanContext
from mfctl.provision.models import FirmwareManifest, load_spec
from mfctl.provision.steps import firmware as step
from mfctl.transport.ssh import CommandResult
from support import PROTOTYPE, ROOT

SPEC = ROOT / "playbooks" / "provision.yaml"
PCI = "0000:0c:00.0"
IMAGE = {"part_number": "MCX623106AN-CDA", "psid": "MT_0000000359", "version": "22.39.1002",
         "image": "/opt/firmware/fw-ConnectX6Dx-MT_0000000359-22_39_1002.bin", "sha256": "a" * 64}


def fwdev(psid="MT_0000000359", burnt="22.31.1014", running=None, part="MCX623106AN-CDA_Ax"):
    return mellanox.FirmwareDevice("ConnectX6DX", part, psid, PCI, burnt, None, None, running)


def levels(*supported):
    return {lv: mellanox.ResetLevel(lv, mellanox.RESET_LEVELS[lv], lv in supported) for lv in (0, 3, 4)}


def ctx(fw, manifest=None, mlx=None, reset_levels=None):
    inv = load_inventory(PROTOTYPE)
    host = inv.hosts[0].model_copy(update={"nics": inv.hosts[0].nics[:1]})  # nic0 only
    more = {step.MORE_KEY: {PCI: reset_levels}} if reset_levels is not None else {}
    act = HostActual({PCI: fw}, {PCI: mlx} if mlx else {}, {}, {}, {}, [], more)
    return PlanContext(inv, 0, host, load_spec(SPEC), FirmwareManifest(images=[manifest or IMAGE]), act)


def plan(c):
    return [a for s in (step.plan_firmware, step.plan_settings, step.plan_reset) for a in s(c)]


def test_a_newer_image_is_burnt_under_the_burn_timeout_then_reset_at_level_3(monkeypatch):
    monkeypatch.setenv("MFCTL_FIRMWARE_BURN_TIMEOUT", "123")
    monkeypatch.setenv("MFCTL_FIRMWARE_RESET_TIMEOUT", "45")
    burn, reset = plan(ctx(fwdev(), reset_levels=levels(3, 4)))
    assert burn.argvs[1] == ["mlxfwmanager", "-u", "-y", "-d", PCI, "-i", IMAGE["image"]] and burn.timeout_s == 123
    assert burn.progress == "burning firmware 22.39.1002 on nic0 (mlxfwmanager; up to 123 s)"
    assert reset.argvs == [["mlxfwreset", "-y", "-d", PCI, "--level", "3", "reset"]] and reset.timeout_s == 45
    assert reset.what == "firmware reset (level 3: Driver restart and PCI reset)" and reset.outcome is None


def test_an_image_of_another_psid_never_matches_through_the_part_number():
    [a] = plan(ctx(fwdev(psid="MT_0000000999")))
    assert a.outcome == OUTCOME_NO_PIN and not a.argvs and not a.is_drift
    assert a.after == "no pinned image for PSID MT_0000000999 (the image for MCX623106AN-CDA is for PSID MT_0000000359)"
    assert service.HostPlan("h", [a]).exit_code == ExitCode.OK  # a finding, not drift: plan has nothing to do


def test_an_oem_psid_is_told_nvidias_image_is_refused():
    [a] = plan(ctx(fwdev(psid="DEL0000000027", part="MCX623106AN-CDA_Ax")))
    assert a.outcome == OUTCOME_NO_PIN
    assert a.after == ("no pinned image: PSID DEL0000000027 (MCX623106AN-CDA_Ax) is an OEM PSID; the card refuses "
                       "NVIDIA's images (MT_0000000359): pin the OEM's image for DEL0000000027")


def test_a_downgrade_is_refused_unless_the_manifest_allows_it():
    [a] = plan(ctx(fwdev(burnt="22.41.1000")))
    assert a.manual and "newer than the pinned 22.39.1002" in a.manual and "allow_downgrade: true" in a.manual
    [burn, _reset] = plan(ctx(fwdev(burnt="22.41.1000"), dict(IMAGE, allow_downgrade=True), reset_levels=levels(3)))
    assert "--force" in burn.argvs[1] and burn.what == "firmware (downgrade, --force)" and burn.after == "22.39.1002"


def test_burnt_but_not_running_needs_only_the_reset():
    [a] = plan(ctx(fwdev(burnt="22.39.1002", running="22.31.1014"), reset_levels=levels(3)))
    assert a.phase == "firmware-reset" and a.argvs[0][-3:] == ["--level", "3", "reset"]


def test_only_a_reboot_would_load_it():
    [_burn, a] = plan(ctx(fwdev(), reset_levels=levels(4)))
    assert a.outcome == OUTCOME_REBOOT and a.is_drift and not a.argvs and not a.manual
    assert a.after.startswith("reboot required: mlxfwreset supports only level 4 (Warm Reboot) on this card")
    assert "`sudo systemctl reboot`" in a.after


def test_a_failed_query_is_not_a_blind_reset():
    [_burn, a] = plan(ctx(fwdev(), reset_levels="gpu01: mlxfwreset -d 0000:0c:00.0 query: exit 1: -E- no device"))
    assert a.manual == "mlxfwreset query failed, so no reset level is known (gpu01: mlxfwreset -d 0000:0c:00.0 query: " \
                       "exit 1: -E- no device)"


def test_a_parameter_the_card_lacks_is_not_supported_on_this_card():
    dev = mellanox.MlxconfigDevice("ConnectX4LX", "MCX4121A-ACA_Ax", PCI, ["default", "current", "next_boot"],
                                   {"SRIOV_EN": {"default": "False(0)", "current": "False(0)", "next_boot": "False(0)"}})
    c = ctx(fwdev(burnt="22.39.1002"), mlx=dev, reset_levels=levels(3))
    c.spec = c.spec.model_copy(update={"mlxconfig": {"LINK_TYPE_P1": 2, "SRIOV_EN": 1}})
    unsupported, change, reset = plan(c)
    assert (unsupported.what, unsupported.before) == ("mlxconfig LINK_TYPE_P1", "absent")
    assert unsupported.outcome == OUTCOME_UNSUPPORTED
    assert unsupported.after == "not supported on this card (the card fixes the port type)" and not unsupported.manual
    assert change.argvs == [["mlxconfig", "-y", "-d", PCI, "set", "SRIOV_EN=1"]]  # the NIC's other settings go on
    assert reset.phase == "firmware-reset"


def test_a_recipe_value_out_of_range_is_a_recipe_error_at_its_line(tmp_path):
    text = SPEC.read_text().replace("../", str(ROOT) + "/")
    assert "  LINK_TYPE_P1: 2" in text
    p = tmp_path / "p.yaml"
    p.write_text(text.replace("  LINK_TYPE_P1: 2", "  LINK_TYPE_P1: -1"))
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    line = 1 + text.splitlines().index(next(x for x in text.splitlines() if x.startswith("  LINK_TYPE_P1: 2")))
    assert e.value.exit_code == 3 and f"{p}:" in str(e.value) and "LINK_TYPE_P1=-1 is out of range: 1..3" in str(e.value)
    assert e.value.line in (line, line - 1)  # the key's line (or its mapping's)


def test_one_image_per_psid():
    with pytest.raises(ValueError, match="two images pinned for PSID MT_0000000359"):
        FirmwareManifest(images=[IMAGE, dict(IMAGE, version="22.41.1000")])


class Pool:
    """Records (argv, timeout) per command; every command succeeds."""

    fanout = 4

    def __init__(self):
        self.seen = []

    def map(self, hosts, fn, **kw):
        from mfctl.transport.ssh import SSHPool

        return SSHPool.map(self, hosts, fn, **kw)

    def run(self, host, argv, timeout=None):
        self.seen.append((list(argv), timeout))
        out = f"{'a' * 64}  x\n" if argv[0] == "sha256sum" else ""
        return CommandResult(host, list(argv), rc=0, stdout=out, stderr="")


def test_apply_runs_each_command_under_its_action_timeout_and_never_runs_an_outcome(monkeypatch):
    monkeypatch.setenv("MFCTL_FIRMWARE_BURN_TIMEOUT", "123")
    acts = plan(ctx(fwdev(), reset_levels=levels(4)))  # burn, then "reboot required"
    acts.append(service.Action("links", "x", "MTU", "1500", "9000", [["ip", "link", "set", "dev", "x", "mtu", "9000"]]))
    pool = Pool()
    [r] = service.apply(pool, [service.HostPlan("h", acts)])
    assert [t for _a, t in pool.seen] == [123, 123, None]  # sha256sum + burn under the burn timeout, ip: the pool's
    assert [a["what"] for a in r.applied] == ["firmware", "MTU"] and r.failed is None
    assert r.notes == [f"nic0 ({PCI}): firmware reset: {acts[1].after}"]
