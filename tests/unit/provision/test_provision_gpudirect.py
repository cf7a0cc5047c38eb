"""GPUDirect RDMA prerequisites (nvidia-peermem, ACS, MaxReadReq) and the GPU step: the
persistence daemon both ways, MIG pending until a GPU reset planned once, never re-issued."""

from types import SimpleNamespace

from mfctl.hosts import gpudirect as gd
from mfctl.inventory import load_inventory
from mfctl.mock.nics import gpudirect as mock_gd
from mfctl.provision.actions import OUTCOME_REBOOT, HostActual, PlanContext
from mfctl.provision.models import load_spec
from mfctl.provision.steps import gpu as gpu_step
from mfctl.provision.steps import gpudirect as gd_step
from support import PROTOTYPE, ROOT

SPEC = ROOT / "playbooks" / "provision.yaml"


def _mock_cfg(factory=True):
    inv = load_inventory(PROTOTYPE)
    return SimpleNamespace(nics={n.pci: n for n in inv.hosts[0].nics}, factory=factory, gpu_persistence=not factory)


def _lspci(cfg) -> str:
    out = []
    assert mock_gd.lspci(cfg, ["-D", "-vvv"], out.append, out.append) == 0
    return out[0]


def test_lspci_layout_acs_and_max_read_req():
    devs = gd.parse_lspci(_lspci(_mock_cfg()))
    br, nic = devs["0000:0b:00.0"], devs["0000:0c:00.0"]
    assert br.has_acs and br.acs_on == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"] and nic.max_read_req == 512
    assert "PCI bridge" in br.desc and not nic.has_acs


def _ctx(cfg, gpus=None):
    inv = load_inventory(PROTOTYPE)
    out = []
    mock_gd.lsmod(cfg, [], out.append, out.append)
    mock_gd.systemctl(cfg, ["show", "-p", "ActiveState,UnitFileState", gd_step.UNIT], out.append, out.append)
    more = {"gpudirect": {"modules": gd.parse_lsmod(out[0]), "pci": gd.parse_lspci(_lspci(cfg)), "unit": gd.parse_unit(out[1])}}
    act = HostActual({}, {}, {}, {}, {}, gpus or [], more=more)
    return PlanContext(inv, 0, inv.hosts[0], load_spec(SPEC), None, act)


def test_factory_host_gets_peermem_acs_off_and_max_read_req_and_setpci_does_it():
    cfg = _mock_cfg()
    acts = gd_step.plan_gpudirect(_ctx(cfg))
    assert [(a.what, a.target) for a in acts][:2] == [("kernel module", "nvidia-peermem"), ("PCIe ACS", "0000:0b:00.0")]
    assert sum(a.what == "PCIe ACS" for a in acts) == 4 and sum(a.what == "MaxReadReq" for a in acts) == 4
    mrr = next(a for a in acts if a.what == "MaxReadReq")
    assert mrr.argvs == [["setpci", "-s", "0000:0c:00.0", "CAP_EXP+0x8.w=5000:7000"]] and mrr.before == "512 bytes"
    for a in acts:  # run them on the mock: then nothing is left
        for argv in a.argvs:
            tool = mock_gd.modprobe if argv[0] == "modprobe" else mock_gd.setpci
            assert tool(cfg, argv[1:], print, print) == 0
    assert gd_step.plan_gpudirect(_ctx(cfg)) == []
    assert gd.parse_lspci(_lspci(cfg))["0000:0b:00.0"].acs_on == []


def test_persistence_is_the_daemon_and_false_undoes_it():
    spec = load_spec(SPEC)
    cfg = _mock_cfg()
    pm = lambda v: [{"index": str(i), "persistence_mode": v, "mig.mode.current": "Disabled", "mig.mode.pending": "Disabled"}  # noqa: E731
                    for i in range(8)]
    [a] = gpu_step._plan_gpu(_ctx(cfg, pm("Disabled")).act, spec)
    assert a.argvs == [["systemctl", "enable", "--now", "nvidia-persistenced"]]
    assert a.before == "nvidia-persistenced inactive/disabled"
    mock_gd.systemctl(cfg, ["enable", "--now", "nvidia-persistenced"], print, lambda t: None)
    assert gpu_step._plan_gpu(_ctx(cfg, pm("Enabled")).act, spec) == []
    off = spec.model_copy(update={"gpu": spec.gpu.model_copy(update={"persistence": False})})
    [b] = gpu_step._plan_gpu(_ctx(cfg, pm("Enabled")).act, off)
    assert b.argvs == [["systemctl", "disable", "--now", "nvidia-persistenced"]]
    mock_gd.systemctl(cfg, ["disable", "--now", "nvidia-persistenced"], print, lambda t: None)
    [c] = gpu_step._plan_gpu(_ctx(cfg, pm("Enabled")).act, off)  # a legacy nvidia-smi -pm 1 is turned off too
    assert c.argvs == [["nvidia-smi", "-pm", "0"]]
    assert gpu_step._plan_gpu(_ctx(cfg, pm("Disabled")).act, off) == []


def test_mig_change_pending_a_gpu_reset_is_planned_once_and_not_reissued():
    spec = load_spec(SPEC)
    mig = spec.model_copy(update={"gpu": spec.gpu.model_copy(update={"mig": True})})
    cfg = _mock_cfg(factory=False)
    g = lambda cur, pend: [{"index": str(i), "persistence_mode": "Enabled", "mig.mode.current": cur,  # noqa: E731
                            "mig.mode.pending": pend} for i in range(8)]
    [a] = gpu_step._plan_gpu(_ctx(cfg, g("Disabled", "Disabled")).act, mig)
    assert a.argvs == [["nvidia-smi", "-mig", "1"]] and a.outcome is None
    [b] = gpu_step._plan_gpu(_ctx(cfg, g("Disabled", "Enabled")).act, mig)
    assert b.argvs == [] and b.outcome == OUTCOME_REBOOT and b.is_drift and not b.runs
    assert b.before == "Disabled (Enabled pending)" and "after a GPU reset" in b.after
    assert gpu_step._plan_gpu(_ctx(cfg, g("Disabled", "Disabled")).act, spec) == []  # mig: false, already off
    [c] = gpu_step._plan_gpu(_ctx(cfg, g("Enabled", "Enabled")).act, spec)  # false acts the same way back
    assert c.argvs == [["nvidia-smi", "-mig", "0"]]
