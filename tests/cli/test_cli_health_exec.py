"""mfctl exec (fan-out, folding, exit codes) and mfctl health (findings, folding, JUnit)."""

import json
import re
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from mfctl import mockctl
from mfctl.cli.fold import fold
from mfctl.errors import ParseError
from mfctl.hosts import ethtool
from mfctl.inventory.hostsets import hostset
from mfctl.transport.ssh import SSHPool
from support import DATA, PROTOTYPE, mfctl_cmd, wait_until


def test_ethtool_stats_real_captures():
    full = ethtool.parse_stats((DATA / "ethtool" / "S-mlx5-cx4lx-fw14.23-kernel4.15-stripped.txt").read_text())
    assert len(full.counters) == 751 and full.counters["rx_prio0_bytes"] == 2202570777997
    assert full.prio_bytes()[0] == 2202570777997 + 2662454044895 and full.prio_bytes()[3] == 0
    # the capture's physical-layer error and drop counters are all there, and all zero
    assert all(n in full.counters for n in ethtool.PHY_ERRORS[:4] + ethtool.DROPS)
    assert ethtool.nonzero(full, ethtool.PHY_ERRORS + ethtool.DROPS) == {}
    grep = ethtool.parse_stats((DATA / "ethtool" / "S-mlx5-grep-prio-roce-all-traffic-prio0.txt").read_text())
    assert grep.counters["rx_prio0_bytes"] == 88034564921216 and sum(v for p, v in grep.prio_bytes().items() if p) == 0
    with pytest.raises(ParseError):
        ethtool.parse_stats("rx_bytes: lots\n")


def test_fold():
    assert hostset(["gpu03", "gpu01", "gpu02", "gpu07"]) == "gpu[01-03,07]"
    items = [("gpu01", "a"), ("gpu02", "a"), ("gpu03", "b")]
    assert fold(items, lambda i: i[0], lambda i: i[1]) == [("gpu[01-02]", ("gpu01", "a")), ("gpu03", ("gpu03", "b"))]


@pytest.fixture
def mock(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    def start(factory=False):
        return mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=factory)["inventory"]
    yield start, cli_env
    mockctl.stop(tmp_path / "mock")


def test_exec_folds_and_exit_codes(mock):
    start, env = mock
    inv = start()
    run = lambda *a: subprocess.run(mfctl_cmd("exec", "-i", inv, *a), capture_output=True, text=True, env=env, timeout=60)  # noqa: E731
    r = run("--json", "gpu[01-04]", "--", "echo", "a b; $(id)")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["folded"] == [{"hosts": "gpu[01-04]", "rc": 0, "stdout": "a b; $(id)\n", "stderr": "", "error": None,
                                                 "truncated": False, "stdout_dropped_bytes": 0, "stderr_dropped_bytes": 0}]
    r = run("--json", "all", "--", "hostname")
    assert [f["hosts"] for f in json.loads(r.stdout)["folded"]] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert run("gpu01", "--", "no-such-tool").returncode == 1
    assert run("gpu09", "--", "true").returncode == 2
    assert run("@all", "--", "true").returncode == 2  # @GROUP names a region of the inventory; there is no "all"
    assert json.loads(run("--json", "@region0!gpu[02-03]", "--", "hostname").stdout)["folded"][1]["hosts"] == "gpu04"
    r = run("all", "--timeout", "0.5", "--json", "--", "sleep", "300")  # options may follow HOSTS (before --) ...
    assert r.returncode == 4 and json.loads(r.stdout)["command"] == ["sleep", "300"]
    r = run("--json", "gpu01", "--", "echo", "-n", "--json")  # ... and after --, every word is the command's
    assert r.returncode == 0 and json.loads(r.stdout)["results"][0]["stdout"] == "-n --json\n"
    # the command must stand after --: click would read its options (-i, --json, --timeout) as mfctl's
    r = run("gpu01", "echo", "-i", "/nonexistent")
    assert r.returncode == 2 and "the command must follow --" in r.stderr
    r = run("gpu01", "echo", "a", "--", "b")
    assert r.returncode == 2 and "'echo a' stands before --" in r.stderr
    r = run("--", "gpu01", "hostname")
    assert r.returncode == 2 and "HOSTS goes before --" in r.stderr
    r = run("gpu01", "ping", "--", "gpu01")  # the command may repeat HOSTS; only "ping" is out of place
    assert r.returncode == 2 and "('ping' stands before --)" in r.stderr
    r = run("gpu01", "--", "echo", "--", "gpu01")  # a -- inside the command is the command's
    assert r.returncode == 0 and r.stdout.splitlines()[1] == "-- gpu01"
    # identical failures fold although each names its host; the exit code is the worst outcome
    r = run("--json", "--timeout", "0.5", "all", "--", "sleep", "300")
    out = json.loads(r.stdout)
    assert r.returncode == 4 and [(f["hosts"], f["error"]) for f in out["folded"]] == [
        ("gpu[01-04]", "timeout: command did not finish within 0.5 s")]


def test_health_sweep_findings_folding_and_junit(mock, tmp_path):
    start, env = mock
    inv = start(factory=True)
    junit = tmp_path / "health.xml"
    r = subprocess.run(mfctl_cmd("health", "-i", inv, "--json", "--junit", junit), capture_output=True, text=True, env=env, timeout=60)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["healthy"]  # warnings only
    msgs = {f["message"] for t in out["targets"] for f in t["findings"]}
    assert "persistence mode is off on GPU 0-7" in msgs
    assert any("traffic on priorities other than 3 (most on prio 0)" in m for m in msgs)
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= 16
    # a connected but dark OCS output is critical: exit 1, a JUnit failure, folded in the table
    assert subprocess.run(mfctl_cmd("ocs", "connect", "300", "700", "-i", inv, "--yes"), env=env, capture_output=True).returncode == 0
    r = subprocess.run(mfctl_cmd("health", "-i", inv, "--junit", junit), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "output port 700 is connected but dark" in r.stdout and "gpu[01-04]" in r.stdout
    assert ET.parse(junit).getroot().get("failures") == "1"
    r = subprocess.run(mfctl_cmd("health", "-i", inv, "--threshold", "nope=1"), capture_output=True, text=True, env=env)
    assert r.returncode == 2


def test_bench_nccl_compares_with_the_topology(mock, tmp_path):
    start, env = mock
    inv = start()
    topo = tmp_path / "c.yaml"
    topo.write_text("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n  - [gpu01/nic1, gpu03/nic0]\n")
    assert subprocess.run(mfctl_cmd("ocs", "apply", topo, "-i", inv, "--yes"), env=env, capture_output=True).returncode == 0
    # at once: measured while the circuits' links may still come up (6.33 s p99 of wall time, the OCS journal's
    # clock), and it says so
    r = subprocess.run(mfctl_cmd("bench", "nccl", "-i", inv, "--json"), capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and any(re.fullmatch(r"measured \d+\.\d s after an OCS change of gpu01's circuits: NIC link-up "
                                                  r"takes ~6.33 s .* run it again", w) for w in json.loads(r.stdout)["warnings"])
    # lit optical lanes on a healthy mock (once the modelled link-up is over: 5.67 s at time scale 100):
    # the modules' readings are within their own thresholds

    def optics_findings():
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--json", "--no-ocs"), capture_output=True, text=True, env=env,
                           timeout=60)
        return [f for t in json.loads(r.stdout)["targets"] for f in t["findings"] if f["check"] == "optics"]
    wait_until(lambda: optics_findings() == [], what="no optics finding once the lanes are up")
    r = subprocess.run(mfctl_cmd("bench", "nccl", "-i", inv, "--json"), capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["circuits_on_host"] == 2
    assert out["expected_busbw_gbs"] == pytest.approx(3 * 11.5, rel=1e-6)  # two 100G circuits + one 100G EPS NIC
    assert out["ratio_to_expected"] == pytest.approx(1.0, abs=0.1) and len(out["rows"]) >= 10


def test_faults_injected_from_the_command_line_reach_the_health_sweep(tmp_path, cli_env):
    """`mfctl mock up --inject` — a separate-process mock with faults, seen through the CLI."""
    state = tmp_path / "faulty"
    up = lambda *a: subprocess.run(mfctl_cmd("mock", "up", PROTOTYPE, "--state-dir", state, "--time-scale", "100", *a),  # noqa: E731
                                   capture_output=True, text=True, env=cli_env, timeout=60)
    r = up("--inject", "gpu07:gpu1=xid79")
    assert r.returncode == 2 and "no host 'gpu07'" in r.stderr
    r = up("--inject", "gpu02:gpu9=xid79")
    assert r.returncode == 2 and "gpuN (0..7)" in r.stderr
    r = up("--inject", "gpu02:gpu1=xid48:10d")
    assert r.returncode == 2 and "at most 9 d (the mock's uptime), e.g. xid48:3d" in r.stderr
    r = up("--inject", "gpu02:gpu3=xid79", "--inject", "gpu01:gpu1=remap-pending", "--inject", "gpu03:ssh=refuse",
           "--inject", "gpu04:nic1=crc:120", "--inject", "gpu01:gpu0=nvlink-down:3")
    assert r.returncode == 0, r.stderr
    try:
        inv = r.stdout.split("inventory: ")[1].strip()
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--json"), capture_output=True, text=True, env=cli_env, timeout=60)
        out = json.loads(r.stdout)
        assert r.returncode == 1
        by = {t["host"]: t for t in out["targets"]}
        assert any("XID 79" in f["message"] and f["severity"] == "critical" for f in by["gpu02"]["findings"])
        assert [(f["code"], f["component"]) for f in by["gpu02"]["findings"] if f["code"] == "gpu.lost"] == [("gpu.lost", "0000:4e:00")]
        assert any("remap" in f["message"] and f["severity"] == "warning" for f in by["gpu01"]["findings"])
        assert any(f["message"] == "GPU 0: NVLink 3 inactive (11 of 12 up)" for f in by["gpu01"]["findings"])
        assert by["gpu03"]["status"] == "critical"
        assert [(f["severity"], f["check"]) for f in by["gpu04"]["findings"]] == [("warning", "nic")]
        assert "nic1: physical-layer errors" in by["gpu04"]["findings"][0]["message"]
        assert "rx_crc_errors_phy=120" in by["gpu04"]["findings"][0]["message"]
        f = by["gpu04"]["findings"][0]
        assert (f["code"], f["component"], f["value"]["rx_crc_errors_phy"], f["limit"]) == ("nic.phy_errors", "nic1", 120, 0)
        # JUnit on stdout: the unreachable host's checks are skipped, not passed; the OCS has its own case
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--junit", "-"), capture_output=True, text=True, env=cli_env,
                           timeout=60)
        suite = ET.fromstring(r.stdout)
        assert suite.get("skipped") == "5" and {tc.get("name") for tc in suite if tc.get("classname") == "gpu03"} == {
            "ssh", "gpu", "nic", "rdma", "optics", "roce"}
        assert [tc.get("name") for tc in suite if tc.get("classname") == "ocs1"] == ["ocs"]
        # NIC error counters: totals until a reading is a window old; then what they gained over the window (nothing)
        sweep = lambda *a: [f for t in json.loads(subprocess.run(  # noqa: E731
            mfctl_cmd("health", "-i", inv, "--json", "--no-ocs", *a), capture_output=True, text=True, env=cli_env,
            timeout=60).stdout)["targets"] if t["host"] == "gpu04" for f in t["findings"]]
        [f] = sweep()
        assert f["code"] == "nic.phy_errors" and "less than a window): rx_crc_errors_phy=120" in f["message"]
        time.sleep(1.1)
        assert sweep("--threshold", "nic_error_window_s=1") == []
        [f] = sweep("--since-boot")
        assert f["value"] == {"rx_crc_errors_phy": 120} and "since the driver loaded: rx_crc_errors_phy=120" in f["message"]
    finally:
        subprocess.run(mfctl_cmd("mock", "down", "--state-dir", state), env=cli_env, capture_output=True)


def test_nic_error_counters_are_judged_over_a_window_of_earlier_sweeps():
    from mfctl.health.history import KEEP_READINGS_S, new_errors, reading, reference, remember
    from mfctl.health.history import history_of as _history
    from mfctl.hosts import ethtool

    stats = lambda crc: ethtool.parse_stats(f"NIC statistics:\n     rx_crc_errors_phy: {crc}\n"  # noqa: E731
                                            "     rx_symbol_err_phy: 4\n     tx_errors_phy: 0\n")
    names, window = ethtool.PHY_ERRORS, 3600.0

    def sweep(hist, t, crc, since_boot=False):
        cur = reading(stats(crc), hist, t)
        ref = None if since_boot else reference(hist, t, window)
        found = new_errors(cur, names, ref, hist[0] if hist and not since_boot else None)
        return remember(hist, cur), found

    # no reading a window old yet: the totals, however often someone looks (CI with a fresh state dir agrees)
    h, f = sweep([], 0, 100)
    assert f == ({"rx_crc_errors_phy": 100, "rx_symbol_err_phy": 4}, "since the driver loaded", False)
    h, f = sweep(h, 5, 100)
    assert f[0]["rx_crc_errors_phy"] == 100 and f[1] == "since the driver loaded (readings for 5 s only, less than a window)"
    # then what the counters gained over the window: +10 at t=600 stays a finding until the window has passed it
    seen = []
    for t, crc in ((600, 110), (700, 110), (3700, 110), (4000, 110), (4300, 110)):
        h, f = sweep(h, t, crc)
        seen.append((f[0].get("rx_crc_errors_phy"), f[2]))
    assert seen == [(110, False), (110, False), (10, True), (10, True), (None, True)]
    # a driver reload in between (110 → 50 → 140) is counted like Prometheus' increase(): 50 + 90
    h2 = h
    for t, crc in ((5000, 50), (5100, 140)):
        h2, f = sweep(h2, t, crc)
    assert f[0]["rx_crc_errors_phy"] == 140 and f[2] and f[1] in ("in the last 73 min", "in the last 75 min")  # t=700 or 600
    # a reload before any reading is a window old does not hide the errors seen before it (0 → 50 → reload → 0)
    hr = []
    for t, crc in ((0, 0), (60, 50), (120, 0)):
        hr, f = sweep(hr, t, crc)
    assert f[0] == {"rx_crc_errors_phy": 50, "rx_symbol_err_phy": 4} and "(and before its reload)" in f[1]
    # a counter missing from one reading continues from the last one that had it (100 → reload 5 → gone → 50: +45)
    cnt = lambda t, **c: {"t": t, "counters": c}  # noqa: E731
    hm = [cnt(0, rx_crc_errors_phy=100)]
    hm = remember(hm, reading(stats(5), hm, 100.0))
    hm = remember(hm, reading(ethtool.parse_stats("rx_symbol_err_phy: 4"), hm, 200.0))
    hm = remember(hm, reading(stats(50), hm, 300.0))
    assert [x.get("total", {}).get("rx_crc_errors_phy") for x in hm] == [None, 105, None, 150]
    ref = reference(hm, 3750.0, window)
    assert ref["t"] == 100 and new_errors(reading(stats(50), hm, 3750.0), names, ref)[0] == {"rx_crc_errors_phy": 45}
    # --since-boot: totals, and the history stays consistent
    _, f = sweep(h2, 5200, 140, since_boot=True)
    assert f == ({"rx_crc_errors_phy": 140, "rx_symbol_err_phy": 4}, "since the driver loaded", False)
    # readings thin out with age, whatever the sweep rate: a week of sweeps every 10 s keeps ~100 per NIC,
    # and errors 50 min old still count against an hour's window
    h3, crc = [], 0
    for t in range(0, 3 * 24 * 3600, 10):
        crc += 1 if t == 3 * 24 * 3600 - 3000 else 0
        h3 = remember(h3, reading(stats(crc), h3, float(t)))
    assert len(h3) < 160 and h3[-1]["t"] == 3 * 24 * 3600 - 10 and KEEP_READINGS_S > 3 * 24 * 3600
    now = 3 * 24 * 3600.0
    ref = reference(h3, now, window)
    assert now - ref["t"] >= window and new_errors(reading(stats(crc), h3, now), names, ref)[0] == {"rx_crc_errors_phy": 1}
    # a damaged readings file is no history, never a crash
    good = {"t": 3, "counters": {"rx_crc_errors_phy": 1}}
    for bad in ([], {"gpu01": []}, {"gpu01": {"nic1": "x"}}, {"gpu01": {"nic1": {"t": "y", "counters": {}}}},
                {"gpu01": {"nic1": [{"t": 1, "counters": {"rx_crc_errors_phy": "12"}}, 5, None]}},
                {"gpu01": {"nic1": {"t": True, "counters": {}}}}, {"gpu01": {"nic1": [{**good, "total": {"x": None}}]}},
                {"gpu01": {"nic1": [{**good, "t": float("nan")}]}}):
        assert _history(bad if isinstance(bad, dict) else None, "gpu01", "nic1") == []
    assert _history({"gpu01": {"nic1": [{**good, "t": 9}, good]}}, "gpu01", "nic1") == [good, {**good, "t": 9}]


def test_host_sets_name_unknown_hosts_and_groups_and_refuse_huge_ranges_at_once():
    from mfctl.errors import UsageError
    from mfctl.inventory.hostsets import select_hosts

    known = ["gpu01", "gpu02", "gpu03", "gpu04"]
    regions = {"region0": known[:3], "spare": ["gpu04"]}
    assert select_hosts("@region0", known, regions) == ["gpu01", "gpu02", "gpu03"]
    assert select_hosts("@region0!gpu02,@spare", known, regions) == ["gpu01", "gpu03", "gpu04"]
    assert select_hosts("gpu[01-04]!gpu[02-03]", known, regions) == ["gpu01", "gpu04"]
    assert select_hosts("all!gpu01", known, regions) == ["gpu02", "gpu03", "gpu04"]
    assert select_hosts("all!@region0", known, regions) == ["gpu04"]
    assert select_hosts("gpu[1-400]!gpu[5-400]", [f"gpu{i}" for i in range(1, 401)]) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    for spec, msg in (("gpu[05-09]", "unknown host(s) gpu[05-09]; the inventory has gpu[01-04]"),
                      ("gpu[03-06]", "unknown host(s) gpu[05-06]"),
                      ("@all", "unknown group @all in host set '@all'; the groups are the inventory's regions: @region0, @spare"),
                      ("gpu[1-9999999]", "expands to more than 100,000 names"),
                      ("gpu[1-99999]!gpu[1-99998]", "expands to more than 100,000 names"), ("gpu[1-400],node[1-400]x[1-400]", "more than"),
                      ("gpu[01-02]!gpu[01-02]", "names no host"), (" ", "empty host set"), ("gpu[", "bad host set"),
                      ("[red]x[/red]", "bad host set '[red]x[/red]': brackets hold a numeric range, as in gpu[01-04]"),
                      ("gpu[1-2]", "unknown host(s) gpu[1-2] (did you mean gpu[01-02]? names are matched exactly"),
                      ("!gpu01", "starts with '!', which takes hosts away from (or intersects with) a set before it: e.g. all!gpu01"),
                      ("gpu01!gpu01" * 1000, "(11,000 characters)' names no host")):
        t = time.monotonic()
        with pytest.raises(UsageError) as e:
            select_hosts(spec, known, regions)
        assert msg in str(e.value) and time.monotonic() - t < 2.0, (spec, str(e.value))


def test_terminal_styles_follow_no_color_like_rich(monkeypatch, capsys):
    import io

    from mfctl.cli import common

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for no_color, want in ((None, "\033[1;31merror:\033[0m x\n"), ("1", "\033[1merror:\033[0m x\n")):
        if no_color:
            monkeypatch.setenv("NO_COLOR", no_color)
        monkeypatch.setattr("sys.stderr", Tty())
        common.print_error("x")
        assert common.sys.stderr.getvalue() == want  # bold stays (no-color.org: colour only), red goes
    monkeypatch.setattr("sys.stdout", io.StringIO())  # not a terminal: plain text, no escape at all
    common.print_heading("---- gpu01 (rc=0) ----")
    assert common.sys.stdout.getvalue() == "---- gpu01 (rc=0) ----\n"


class _Answers:
    """A stand-in for SSHPool that answers each command with a file's text (real captures)."""

    fanout = 4
    map = SSHPool.map  # the real fan-out over this stand-in's run

    def __init__(self, answers):
        self.answers = answers  # (argv prefix) → stdout

    def run(self, host, argv, **_):
        from mfctl.transport.ssh import CommandResult

        for prefix, text in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return CommandResult(host, list(argv), rc=0, stdout=text)
        return CommandResult(host, list(argv), rc=127, stderr=f"{argv[0]}: command not found")

    def run_many(self, hosts, argv_for, **_):
        return [self.run(h, argv_for(h)) for h in hosts]


def test_every_judgement_on_real_captures():
    """GPU temperature, link speed, transceiver alarms and Rx power, a down EPS RDMA port, a down
    EPS link and OCS alarms — judged from real tools' outputs (tests/data), with their codes."""
    from mfctl import health
    from mfctl.hosts.nvidia_smi import HEALTH_FIELDS
    from mfctl.inventory import load_inventory
    from support import DATA, PROTOTYPE

    inv = load_inventory(PROTOTYPE)
    inv.hosts[0].nics[3].rdma_device = "mlx5_2"  # the EPS NIC is the capture's down port
    hdr = {"power.draw": "power.draw [W]", "utilization.gpu": "utilization.gpu [%]", "clocks.sm": "clocks.sm [MHz]",
           "clocks.max.sm": "clocks.max.sm [MHz]"}
    rows = [[str(i), f"00000000:{7 + i:02X}:00.0", "NVIDIA A100-SXM4-80GB", str(temp), "250.00 W", "90 %", "0", "Enabled",
             "Disabled", "No", "No", "1410 MHz", "1410 MHz"] + ["Not Active"] * (len(HEALTH_FIELDS) - 13)
            for i, temp in enumerate([40, 41, 82, 90, 40, 40, 40, 40])]
    csv = ", ".join(hdr.get(f, f) for f in HEALTH_FIELDS) + "\n" + "\n".join(", ".join(r) for r in rows) + "\n"
    links = json.dumps([{"ifname": n, "operstate": "DOWN" if n == "ens4f0np0" else "UP",
                         "flags": [] if n == "ens4f0np0" else ["BROADCAST", "UP", "LOWER_UP"]}
                        for n in ("ens1f0np0", "ens2f0np0", "ens3f0np0", "ens4f0np0")])
    read = lambda kind, name: (DATA / kind / name).read_text()  # noqa: E731
    pool = _Answers({("nvidia-smi", f"--query-gpu={','.join(HEALTH_FIELDS)}"): csv, ("ip", "-j", "link"): links,
                     ("dmesg",): "", ("ibstat",): read("mellanox", "ibstat-h100-cx7-ib-cx6dx-eth-some-down.txt"),
                     ("ethtool", "-m", "ens1f0np0"): read("ethtool", "m-sff8636-qsfp28-cwdm4-laser-disabled-alarms.txt"),
                     ("ethtool", "-m"): read("ethtool", "m-sff8636-qsfp28-cwdm4-healthy.txt"),
                     ("ethtool", "ens2f0np0"): read("ethtool", "link-cx4-40g-up.txt")})
    [hh, ocs] = health.sweep(pool, inv, ["gpu01"], ocs_state={"standing": ["LOS-1 port 12"], "dark_outputs": [700]})
    got = {(f.code, f.severity, f.component, f.value, f.limit, f.unit) for f in hh.findings if not isinstance(f.value, list)}
    assert ("gpu.temperature", "warning", "gpu2", 82, 80.0, "C") in got and ("gpu.temperature", "critical", "gpu3", 90, 87.0, "C") in got
    assert ("nic.eps_link_down", "critical", "ens4f0np0", "DOWN", None, None) in got
    assert ("rdma.port_down", "critical", "mlx5_2/1", "Down", None, None) in got
    assert ("nic.speed", "warning", "ens2f0np0", 40000, 100000, "Mb/s") in got
    optics = [f for f in hh.findings if f.check == "optics" and f.component.startswith("ens1f0np0")]
    assert [(f.severity, f.component, f.value) for f in optics if f.code == "optics.laser_off"] == [
        ("critical", "ens1f0np0", [1, 2, 3, 4])]
    assert [(f.severity, f.component, f.value, f.limit, f.message) for f in optics if f.code == "optics.rx_power_low"][0] == (
        "critical", "ens1f0np0/1", None, -16.0, "ens1f0np0 channel 1: no Rx light (no power reading)")
    assert not any(f.code in ("optics.flag", "optics.bias_low") and "bias" in f.message for f in optics)  # explained: lasers off
    assert not [f for f in hh.findings if f.check == "optics" and not f.component.startswith("ens1f0np0")]  # healthy modules
    assert {(f.code, f.component, f.value) for f in ocs.findings} == {("ocs.alarm", None, "LOS-1 port 12"),
                                                                      ("ocs.dark_port", "port700", 700)}
    tl1 = '500:MJ,LOS,SA,11-30,03-30-00,NEND,RCV:\\"Loss of signal\\"'  # as RTRV-ALM-ALL answers (the OCS emulator)
    [_, ocs] = health.sweep(pool, inv, ["gpu01"], ocs_state={"standing": [tl1], "dark_outputs": []})
    assert [(f.code, f.component) for f in ocs.findings] == [("ocs.alarm", "port500")]



def test_transceiver_readings_are_judged_against_the_modules_own_thresholds():
    from mfctl.health.checks.optics import judge_module
    from mfctl.hosts import ethtool
    from support import DATA

    mod = lambda name: ethtool.parse_module((DATA / "ethtool" / name).read_text())  # noqa: E731
    assert judge_module(mod("m-sff8636-qsfp28-cwdm4-healthy.txt")) == []
    # CMIS 400G module using 4 of its 8 lanes: the temperature warning, and nothing about the idle lanes 5-8
    assert judge_module(mod("m-cmis40-qsfpdd-400g-xdr4-temp-warning.txt")) == [
        ("warning", "optics.temperature_high", None, 70.49, 70.0, "C",
         "Module temperature 70.49 °C above the module's warning threshold 70 °C")]
    m = mod("m-sff8636-qsfp28-cwdm4-healthy.txt")
    # the capture's own thresholds: Tx low alarm -8 dBm, bias high warning 50 / alarm 55 mA, voltage low warning 3.135 V
    m.tx_power_dbm[2], m.bias_ma[3], m.voltage_v, m.rx_power_dbm[4] = -9.0, 52.0, 3.0, None
    got = {(sev, code, ch, v, lim) for sev, code, ch, v, lim, _, _ in judge_module(m)}
    assert got == {("critical", "optics.tx_power_low", 2, -9.0, -8.0), ("warning", "optics.bias_high", 3, 52.0, 50.0),
                   ("warning", "optics.voltage_low", None, 3.0, 3.135), ("critical", "optics.rx_power_low", 4, None, -16.0)}


def test_threshold_overrides_are_checked_alone_and_together():
    from mfctl.health.thresholds import thresholds

    assert thresholds({"gpu_temp_warn_c": 88, "gpu_temp_crit_c": 95})["gpu_temp_warn_c"] == 88  # together they agree
    for bad, msg in (({"roce_priority": 9}, "priority from 0 to 7"), ({"roce_priority": 2.5}, "priority from 0 to 7"),
                     ({"gpu_temp_warn_c": 90}, "expected below gpu_temp_crit_c (87, the default)"),
                     ({"gpu_temp_crit_c": 70}, "gpu_temp_crit_c=70: expected above gpu_temp_warn_c (80, the default)"),
                     ({"gpu_temp_crit_c": 70, "gpu_temp_warn_c": 75}, "gpu_temp_warn_c=75: expected below gpu_temp_crit_c (70)"), ({"nic_drops_max": -1}, "0 or more"),
                     ({"sm_clock_min_share": 2}, "share from 0 to 1"), ({"gpu_temp_crit_c": float("nan")}, "finite"),
                     ({"nic_error_window_s": 8 * 86400}, "at most 604800 s"), ({"nic_error_window_s": 0}, "above 0 s")):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            thresholds(bad)
    with pytest.raises(KeyError):
        thresholds({"nope": 1})


def test_many_ports_with_one_alarm_fold_into_one_finding_and_one_row():
    """issue 17 item 17: 372 dark cross-connects were ~760 rows; the same alarm on many ports is one
    finding naming the port range, and so are the connected-but-dark outputs."""
    from mfctl.health.checks import ocs as ocs_check
    from mfctl.inventory import load_inventory
    from support import PROTOTYPE

    los = [f'{p}:MJ,LOS,SA,11-30,03-30-00,NEND,RCV:\\"Loss of signal\\"' for p in [*range(397, 769), 800]]
    state = {"standing": [*los, '5:MN,HITEMP,NSA,11-30,03-30-00,NEND,RCV:\\"High temperature\\"',
                          'SHELF-1:CR,PWR,SA,11-30,03-30-00,NEND,NA:\\"Power supply\\"'],
             "dark_outputs": [*range(397, 769), 800]}
    hh = ocs_check.judge(load_inventory(PROTOTYPE), state)
    assert [(f.code, f.component, f.message) for f in hh.findings] == [
        ("ocs.alarm", "SHELF-1", "standing alarm SHELF-1: CR PWR — Power supply"),
        ("ocs.alarm", "port[397-768,800]", "standing alarm ports 397-768,800: MJ LOS — Loss of signal (373 ports)"),
        ("ocs.alarm", "port5", "standing alarm port 5: MN HITEMP — High temperature"),
        ("ocs.dark_port", "port[397-768,800]", "output ports 397-768,800 are connected but dark (373 ports)")]
    assert len(hh.findings[1].value) == 373 and hh.findings[3].value[-1] == 800
