"""Several RoCE ports of one host in one subnet: ARP/rp_filter per interface and a routing table
per rail, planned only for lanes that share a subnet; the mock's ip rule/route and sysctl."""

import json
from types import SimpleNamespace

from mfctl.hosts import mellanox, rails
from mfctl.inventory import load_inventory
from mfctl.mock.nics import routes, sysfs
from mfctl.mock.nics.qos import PortState
from mfctl.provision.actions import HostActual, PlanContext
from mfctl.provision.models import load_spec
from mfctl.provision.steps import rails as rails_step
from support import PROTOTYPE, ROOT

SPEC = ROOT / "playbooks" / "provision.yaml"
BREAKOUT = ROOT / "inventory" / "mfabric-breakout.yaml"
PORTS = {"port": {"pci/0000:0c:00.0/65535": {"netdev": "ens1f0np0", "flavour": "physical"},
                  "pci/0000:0c:00.1/131071": {"netdev": "ens1f1np1", "flavour": "physical"},
                  "pci/0000:12:00.0/65535": {"netdev": "ens2f0np0", "flavour": "physical"},
                  "pci/0000:8a:00.0/65535": {"netdev": "ens3f0np0", "flavour": "physical"},
                  "pci/0000:90:00.0/65535": {"netdev": "ens4f0np0", "flavour": "physical"}}}


def _ctx(inv_path, files, rules=(), routes_=()):
    inv = load_inventory(inv_path)
    act = HostActual({}, {}, mellanox.parse_devlink_ports(json.dumps(PORTS)), {}, {}, [],
                     more={"roce": {"qos": {}, "files": files, "fec": {}},
                           "rails": {"rules": list(rules), "routes": list(routes_)}})
    return PlanContext(inv, 0, inv.hosts[0], load_spec(SPEC), None, act)


def test_sub_ports_in_one_subnet_get_arp_rp_filter_rules_and_tables():
    files = {rails.conf_path(i, k): "0" for i in ("all", "ens1f0np0", "ens1f1np1") for k in rails.SYSCTLS}
    files[rails.conf_path("all", "rp_filter")] = "1"  # strict on all: still <= 2, max(all, IF) = 2 is what we want
    acts = rails_step.plan_rails(_ctx(BREAKOUT, files))
    got = [(a.target, a.what, a.after) for a in acts]
    assert got == [
        ("ens1f0np0", "ARP/rp_filter", "arp_ignore=1, arp_announce=2, rp_filter=2"),
        ("ens1f0np0", "source rule", "100: from 198.18.0.1 lookup 101"),
        ("ens1f0np0", "route in table 101", "198.18.0.0/24 dev ens1f0np0 src 198.18.0.1"),
        ("ens1f1np1", "ARP/rp_filter", "arp_ignore=1, arp_announce=2, rp_filter=2"),
        ("ens1f1np1", "source rule", "101: from 198.18.0.2 lookup 102"),
        ("ens1f1np1", "route in table 102", "198.18.0.0/24 dev ens1f1np1 src 198.18.0.2")]
    assert acts[0].argvs[0] == ["sysctl", "-w", "net/ipv4/conf/ens1f0np0/arp_ignore=1"]
    assert acts[5].argvs == [["ip", "route", "replace", "198.18.0.0/24", "dev", "ens1f1np1", "src", "198.18.0.2",
                              "table", "102"]]


def test_a_higher_conf_all_wins_and_is_planned_down_and_done_rails_are_left_alone():
    files = {rails.conf_path(i, k): v for i in ("ens1f0np0", "ens1f1np1")
             for k, v in (("arp_ignore", "1"), ("arp_announce", "2"), ("rp_filter", "2"))}
    files.update({rails.conf_path("all", "arp_ignore"): "2", rails.conf_path("all", "arp_announce"): "0",
                  rails.conf_path("all", "rp_filter"): "0"})
    rules = [(100, "198.18.0.1", "101"), (101, "198.18.0.2", "102")]
    rts = [{"dst": "198.18.0.0/24", "dev": "ens1f0np0", "table": "101", "prefsrc": "198.18.0.1"},
           {"dst": "198.18.0.0/24", "dev": "ens1f1np1", "table": "102", "prefsrc": "198.18.0.2"}]
    [a] = rails_step.plan_rails(_ctx(BREAKOUT, files, rules, rts))
    assert (a.target, a.what, a.before, a.after) == ("all interfaces", "arp_ignore", "all=2", "all=1")


def test_lanes_alone_in_their_subnet_need_no_rails():
    assert rails_step.plan_rails(_ctx(PROTOTYPE, {})) == []


def test_mock_ip_rule_route_and_sysctl_answer_like_iproute2_and_procps():
    nd = lambda a: SimpleNamespace(addresses=a, roce=PortState())  # noqa: E731
    cfg = SimpleNamespace(netdevs={"ens1f0np0": nd(["198.18.0.1/24"]), "ens1f1np1": nd(["198.18.0.2/24"])})
    out, err = [], []
    o, e = out.append, err.append
    assert routes.ip(cfg, rails.rule_add_argv("198.18.0.2", 102, 101)[1:], False, o, e) == 0
    assert routes.ip(cfg, rails.rule_add_argv("198.18.0.2", 102, 101)[1:], False, o, e) == 2
    assert err[-1] == "RTNETLINK answers: File exists\n"
    assert routes.ip(cfg, rails.route_replace_argv("198.18.0.0/24", "ens1f1np1", "198.18.0.2", 102)[1:], False, o, e) == 0
    assert routes.ip(cfg, ["route", "replace", "198.18.0.0/24", "dev", "nope", "table", "102"], False, o, e) == 1
    out.clear()
    routes.ip(cfg, ["rule", "show"], True, o, e)
    assert rails.parse_rules(out[0]) == [(0, "all", "local"), (101, "198.18.0.2", "102"), (32766, "all", "main"),
                                         (32767, "all", "default")]
    out.clear()
    routes.ip(cfg, ["route", "show", "table", "all"], True, o, e)
    rt = rails.parse_routes(out[0])
    assert {"dst": "198.18.0.0/24", "dev": "ens1f1np1", "table": "102", "protocol": "boot", "scope": "link",
            "flags": [], "prefsrc": "198.18.0.2"} in rt
    assert sum(r["table"] == "main" for r in rt) == 2  # the kernel's connected routes, one per address
    assert sysfs.sysctl(cfg, ["-w", "net/ipv4/conf/ens1f0np0/rp_filter=2"], o, e) == 0
    assert out[-1] == "net.ipv4.conf.ens1f0np0.rp_filter = 2\n" and cfg.netdevs["ens1f0np0"].roce.sysctl["rp_filter"] == 2
    assert sysfs.sysctl(cfg, ["-w", "net/ipv4/conf/ens1f0np0/rp_filter=3"], o, e) == 255
    assert sysfs.sysctl(cfg, ["-w", "net/ipv4/conf/ens9/rp_filter=2"], o, e) == 255
