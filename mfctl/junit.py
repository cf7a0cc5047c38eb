"""JUnit XML as CI systems read it: the ``junit-10.xsd`` family (Jenkins' xUnit plugin, which
GitLab, GitHub Actions' report actions, junitparser and pytest's ``--junitxml`` follow).

One writer for every report mfctl makes (``mfctl health --junit``, ``mfctl run --junit``):
one ``<testsuite>`` as the root (several: under a ``<testsuites>`` with the totals), each carrying every attribute
the schema requires (``name``, ``tests``, ``failures``, ``errors``) and ``skipped``, ``time``
(seconds), ``timestamp`` and ``hostname``; each ``<testcase>`` with at most one of
``failure``/``error``/``skipped`` and its ``system-out``/``system-err``; ``properties`` of name
and value. Every text and attribute goes through :func:`xml_text` first: host output carries
control characters (an ANSI colour escape from a tool's stderr) that XML 1.0 forbids — an
ElementTree, lxml or junitparser reader refuses the whole file for one ``\\x1b`` — and they are
shown as ``\\xNN`` by the same rule the terminal uses (:func:`mfctl.cli.plain.visible`).
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

# what XML 1.0 forbids beyond what visible() already shows (surrogates, U+FFFE, U+FFFF)
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def xml_text(text: object) -> str:
    """``text`` as XML 1.0 may hold it: control characters (C0 but newline and tab, DEL, C1, the
    bidirectional overrides) shown as ``\\xNN`` as on the terminal, and the few other code points
    XML forbids as ``\\uNNNN``. The one rule for both outputs."""
    from mfctl.cli.plain import visible

    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(str(text)))


@dataclass
class Case:
    """One test case: ``outcome`` is ``passed``, ``failure`` (a check found a problem),
    ``error`` (it could not be judged: a phase that broke) or ``skipped``; ``message`` the one
    line CI shows, ``detail`` the text under it; ``time`` in seconds."""

    name: str
    classname: str = ""
    outcome: str = "passed"
    message: str = ""
    detail: str = ""
    time: float | None = None
    system_out: str = ""
    system_err: str = ""
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class Suite:
    """One ``<testsuite>``: its cases, ``time`` in seconds (default: the cases' sum),
    ``timestamp`` (epoch s; default now) and suite ``properties``."""

    name: str
    cases: list[Case] = field(default_factory=list)
    time: float | None = None
    timestamp: float | None = None
    properties: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.cases)


def _seconds(t: float | None) -> str:
    return f"{max(0.0, t or 0.0):.3f}"  # SUREFIRE_TIME: digits and a dot, no exponent, never negative


def _properties(parent, props: dict[str, str]) -> None:
    import xml.etree.ElementTree as ET

    if props:
        el = ET.SubElement(parent, "properties")
        for k, v in props.items():
            ET.SubElement(el, "property", name=xml_text(k), value=xml_text(v))


def _case(parent, c: Case) -> None:
    import xml.etree.ElementTree as ET

    if c.outcome not in ("passed", "failure", "error", "skipped"):
        raise ValueError(f"test case outcome {c.outcome!r}")
    tc = ET.SubElement(parent, "testcase", name=xml_text(c.name), classname=xml_text(c.classname), time=_seconds(c.time))
    if c.outcome != "passed":
        el = ET.SubElement(tc, c.outcome, message=xml_text(c.message))
        if c.outcome != "skipped":
            el.set("type", c.outcome)
        if c.detail:
            el.text = xml_text(c.detail)
    out = c.system_out
    if c.properties:  # junit-10.xsd has no properties in a testcase: they lead its system-out
        out = "\n".join(f"{k}: {v}" for k, v in c.properties.items()) + ("\n" + out if out else "")
    if out:
        ET.SubElement(tc, "system-out").text = xml_text(out)
    if c.system_err:
        ET.SubElement(tc, "system-err").text = xml_text(c.system_err)


def _suite(parent, s: Suite, host: str):
    """One ``<testsuite>`` under ``parent`` (None: as the root); returns it and its counts."""
    import xml.etree.ElementTree as ET

    t = s.time if s.time is not None else sum(c.time or 0.0 for c in s.cases)
    n = {"tests": len(s.cases), "failures": s.count("failure"), "errors": s.count("error"), "skipped": s.count("skipped")}
    attrs = {"name": xml_text(s.name), **{k: str(v) for k, v in n.items()}, "time": _seconds(t), "hostname": xml_text(host),
             "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(s.timestamp or time.time()))}
    el = ET.Element("testsuite", attrs) if parent is None else ET.SubElement(parent, "testsuite", attrs)
    _properties(el, s.properties)
    for c in s.cases:
        _case(el, c)
    return el, n


def element(suites: list[Suite], name: str = "mfctl"):
    """The report's root element: one suite is the ``<testsuite>`` root itself (as ``pytest
    --junitxml`` and Ant write it), several go under a ``<testsuites>`` with the totals."""
    import xml.etree.ElementTree as ET

    host = socket.gethostname()
    if len(suites) == 1:
        return _suite(None, suites[0], host)[0]
    root = ET.Element("testsuites", name=xml_text(name))
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for s in suites:
        _, n = _suite(root, s, host)
        for k in totals:
            totals[k] += n[k]
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", _seconds(sum(float(e.get("time", "0")) for e in root)))
    return root


def document(suites: list[Suite], name: str = "mfctl") -> str:
    """The JUnit XML text (with its declaration) of ``suites``: valid against junit-10.xsd."""
    import xml.etree.ElementTree as ET

    return '<?xml version="1.0"?>\n' + ET.tostring(element(suites, name), encoding="unicode") + "\n"


def write(path: str | Path, suites: list[Suite], name: str = "mfctl") -> None:
    """Write :func:`document` to ``path`` (``-``: stdout), whole or not at all (a new file renamed
    over the old: a CI reader never sees half a report)."""
    import os
    import sys
    import tempfile

    text = document(suites, name)
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_suite(summary: dict, preflight: list | None = None, *, started: float | None = None,
              wall_s: float | None = None) -> Suite:
    """A run's report (``mfctl run --junit``): its phases as test cases of class ``run`` —
    ``health`` (the pre-flight sweep), ``ocs.initial_topology``, ``launch``, ``train``, one
    ``reconfiguration.epoch<N>`` per reconfiguration, ``ocs.final_readback`` — then, with
    ``preflight`` (the sweep's :class:`mfctl.health.HostHealth` list), each host's checks as
    ``mfctl health --junit`` has them. ``summary`` is the ``mfctl.run.summary/v1`` object.

    A phase passed when the run went past it (the next phase's record exists); the first one that
    did not is the run's error (``error``; a health gate that stopped the run, a failure), and those
    after it are skipped. Times: the sweep's and the training's wall seconds; a reconfiguration's
    switch + link-up + runtime (testbed seconds, as the summary has them). The cases overlap (the
    reconfigurations happen during ``train``, the host checks during ``health``), so the suite's
    ``time`` is the run's wall time ``wall_s`` (s) and its ``timestamp`` the run's start
    ``started`` (epoch s), as JUnit means them, not the cases' sum."""
    status, err = summary.get("status"), summary.get("error") or ""
    health = summary.get("health") or {}
    init = summary.get("initial_topology") or {}
    ocs = summary.get("ocs")
    iters, planned = summary.get("iterations") or 0, summary.get("iterations_planned") or 0
    ok = status == "ok"
    phases = [  # (name, went past it, seconds)
        ("health", ok or init.get("apply") is not None or iters > 0, health.get("sweep_s")),
        ("ocs.initial_topology", ok or init.get("apply") is not None, (init.get("linkup_ms") or 0) / 1000),
        ("launch", ok or iters > 0, None),
        ("train", ok or (planned and iters >= planned), summary.get("wall_train_s")),
        ("ocs.final_readback", ok or ocs is not None, None),
    ]
    suite = Suite(f"mfctl-run {summary.get('playbook', '?')}", time=wall_s, timestamp=started,
                  properties={k: str(summary.get(k)) for k in ("run_id", "status", "playbook", "inventory", "run_dir")})
    broke = None
    for name, past, secs in phases:
        c = Case(name, classname="run", time=secs)
        if broke is not None:
            c.outcome, c.message = "skipped", f"not reached: the run stopped in {broke}"
        elif not past:
            broke = name
            gate = name == "health" and err.startswith("health sweep found")
            c.outcome, c.message = ("failure" if gate else "error"), err or f"the run ended {status}"
            c.detail = f"run {summary.get('run_id')} {status}: {err}"
        elif name == "ocs.final_readback" and ocs is not None and not ocs.get("matches_last_plan"):
            c.outcome, c.message = "failure", "the OCS read back at the end differs from the last plan"
            c.detail = f"cross-connects read back: {ocs.get('cross_connects')}"
        if name == "health" and health.get("hosts"):
            c.system_out = f"{health.get('ok')}/{health.get('hosts')} hosts healthy"
        suite.cases.append(c)
        if name == "train":  # the reconfigurations happened during training
            for r in summary.get("reconfigurations") or []:
                rc = Case(f"reconfiguration.epoch{r.get('epoch')}", classname="run",
                          time=sum(r.get(k) or 0.0 for k in ("t_switch_ms", "t_linkup_ms", "t_runtime_ms")) / 1000,
                          properties={k: str(r.get(k)) for k in ("region", "iteration", "xc_added", "xc_removed",
                                                                  "t_switch_ms", "t_linkup_ms", "t_runtime_ms")})
                if r.get("outcome", "applied") != "applied":
                    rc.outcome, rc.message = "failure", f"epoch {r.get('epoch')} {r.get('outcome')}: {r.get('error') or ''}"
                suite.cases.append(rc)
    if preflight:
        from mfctl.health.findings import GROUPS, junit_cases

        suite.cases.extend(junit_cases(preflight, GROUPS))
    return suite
