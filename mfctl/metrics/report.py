"""``mfctl runs report RUN``: one self-contained HTML file with PNG plots (matplotlib,
embedded as data: URIs) — iteration time and tokens/s over the run with every
reconfiguration marked, reconfiguration phase times, circuits per server pair over time,
the traffic matrix (heat map), prediction errors, and the health sweep."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def build(run_dir: Path) -> str:
    """The report's HTML for the run in ``run_dir`` (its metrics.db and summary.json; a run that
    crashed before writing its summary is reported from what :func:`mfctl.runtime.rundir.recover`
    finds). Raises UsageError when metrics.db is missing, DataError (exit 3) when either is
    unreadable (:func:`mfctl.runtime.rundir.read_summary`)."""
    import matplotlib

    matplotlib.use("Agg")

    from mfctl.metrics.export import _db
    from mfctl.runtime.rundir import read_summary

    db = _db(run_dir)
    summary = read_summary(run_dir)
    rows = db.execute("SELECT iteration, seconds, tokens, epoch, paused FROM iterations WHERE host = "
                      "(SELECT MIN(host) FROM iterations) ORDER BY iteration").fetchall()
    recs = db.execute("SELECT epoch, iteration, t_switch_ms, t_linkup_ms, t_runtime_ms, circuits_json, region "
                      "FROM reconfigurations ORDER BY epoch").fetchall()
    preds = db.execute("SELECT iteration, predictor, rel_error FROM predictions ORDER BY iteration").fetchall()
    health = db.execute("SELECT host, status, findings_json, wall_unix FROM health ORDER BY wall_unix").fetchall()
    plots: list[tuple[str, str, str]] = []  # (id, title, data uri)
    if rows:
        plots.append(_plot_iterations(rows, recs))
    if recs:
        plots.append(_plot_phases(recs))
        plots.extend(_plot_circuits(summary, rows, recs))
    if preds:
        plots.append(_plot_predictions(preds))
    if health:  # the pre-flight sweep, then the samples taken during the run
        plots.append(_plot_health(health))
    return _page(summary, plots)


def _plot_iterations(rows, recs):
    import matplotlib.pyplot as plt

    it = np.array([r[0] for r in rows])
    sec = np.array([r[1] or 0 for r in rows])
    tok = np.array([r[2] or 0 for r in rows])
    fig, ax = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    ax[0].plot(it, sec, marker=".", color="#4c72b0")
    ax[0].set_ylabel("iteration time (s)")
    ax[1].plot(it, np.divide(tok, sec, out=np.zeros_like(sec), where=sec > 0), marker=".", color="#55a868")
    ax[1].set_ylabel("tokens/s")
    ax[1].set_xlabel("iteration")
    for e, i, *_ in recs:
        for a in ax:
            a.axvline(i, color="#c44e52", ls="--", lw=1)
        ax[0].annotate(f"epoch {e}", (i, ax[0].get_ylim()[1]), fontsize=8, color="#c44e52", va="top")
    fig.tight_layout()
    return ("iteration-time", "Iteration time and throughput (dashed: reconfigurations)", _png(fig))


def _plot_phases(recs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ep = [f"epoch {r[0]}" for r in recs]
    sw = np.array([r[2] or 0 for r in recs]) / 1000
    lu = np.array([r[3] or 0 for r in recs]) / 1000
    rt = np.array([r[4] or 0 for r in recs]) / 1000
    ax.barh(ep, sw, label="OCS switch (wall)", color="#4c72b0")
    ax.barh(ep, lu, left=sw, label="link-up (testbed)", color="#dd8452")
    ax.barh(ep, rt, left=sw + lu, label="runtime drain+resume (testbed)", color="#55a868")
    ax.set_xlabel("seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return ("phases", "Reconfiguration phase times", _png(fig))


def _plot_circuits(summary, rows, recs) -> list[tuple[str, str, str]]:
    """Circuits per server pair over the run, and the last plan's matrix (one region's: the first
    that was re-wired)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    topo0 = summary.initial_topology or {}
    region = recs[0][6]  # one region's circuits (several regions: the first that was re-wired)
    init = (topo0.get("circuits") or {}).get(region)
    mine = [r for r in recs if r[6] == region]
    mats = ([(0, np.array(init))] if init else []) + [(r[1], np.array(json.loads(r[5]))) for r in mine]
    last_it = rows[-1][0] if rows else mats[-1][0]
    n = mats[0][1].shape[0]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    names = (topo0.get("hosts") or {}).get(region)
    names = names if names and len(names) == n else [f"s{i}" for i in range(n)]  # (runs before hosts were kept)
    for k, (i, j) in enumerate(pairs):
        xs = [m[0] for m in mats] + [last_it]
        ys = [m[1][i, j] for m in mats] + [mats[-1][1][i, j]]
        ax.step(xs, np.array(ys) + 0.04 * (k - len(pairs) / 2), where="post", label=f"{names[i]}-{names[j]}")
    top = int(max(m[1].max() for m in mats))
    ax.set_yticks(range(top + 1))  # whole circuits; the lines are nudged apart only to be told apart
    ax.set_ylim(-0.4, top + 0.4)
    ax.set_xlabel("iteration")
    ax.set_ylabel("circuits")
    ax.legend(fontsize=7, ncol=min(6, len(pairs)))
    fig.tight_layout()
    out = [("circuits", f"Circuits per server pair after each reconfiguration ({region})", _png(fig))]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    last = np.array(json.loads(mine[-1][5]))
    im = ax.imshow(last, cmap="viridis")
    ax.set_xticks(range(n), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_title("last plan: circuits between servers")
    fig.colorbar(im, ax=ax, label="circuits", ticks=range(int(last.max()) + 1))
    fig.tight_layout()
    out.append(("heatmap", f"Circuit matrix of the last plan (heat map, {region})", _png(fig)))
    return out


def _plot_predictions(preds):
    """Each predictor's relative error per iteration: |guess − actual| summed over the EP traffic
    matrix, over the actual total (:func:`mfctl.fabric.predict.rel_error`), in %."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3))
    for name in sorted({p[1] for p in preds}):
        pts = [(p[0], p[2]) for p in preds if p[1] == name]
        ax.plot([a for a, _ in pts], [100 * b for _, b in pts], marker=".", label=name)
    ax.set_ylabel("relative error (%)")
    ax.set_xlabel("iteration")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, title="predictor", title_fontsize=8)
    fig.tight_layout()
    return ("prediction", "Traffic prediction error: relative error of each predictor's EP traffic against the actual, "
                          "per iteration (last, ewma: from past iterations; crosslayer-A-B: layer B from layer A)",
            _png(fig))


HEALTH_COLOURS = {"ok": "#55a868", "warning": "#dd8452", "critical": "#c44e52"}  #: a health sample's status → colour


def _plot_health(health):
    """One lane per host; each health sample is a dot at its time, coloured by its status, with its
    number of findings written above it when there are any: a host with nothing found is a row of
    green dots (lines offset to stay apart, over a single "0" tick, read as findings)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    t0 = min(h[3] for h in health)
    hosts_h = sorted({h[0] for h in health})
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.35 * len(hosts_h)))
    t_end, seen, counted = 0.0, set(), False
    for k, host in enumerate(hosts_h):
        pts = [(h[3] - t0, len(json.loads(h[2] or "[]")), h[1]) for h in health if h[0] == host]
        t_end = max([t_end] + [p[0] for p in pts])
        ax.plot([p[0] for p in pts], [k] * len(pts), color="#d0d0d0", lw=1, zorder=1)
        for t, n, status in pts:
            seen.add(status)
            ax.scatter([t], [k], s=28, color=HEALTH_COLOURS.get(status, "#8172b3"), zorder=2)
            if n:
                counted = True
                ax.annotate(str(n), (t, k), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=7)
    ax.set_yticks(range(len(hosts_h)), hosts_h, fontsize=8)
    ax.set_ylim(len(hosts_h) - 0.4, -0.6)  # first host on top
    ax.set_xlim(-0.05 * max(t_end, 1.0), max(t_end, 1.0) * 1.05)
    ax.set_xlabel("seconds since the pre-flight sweep (wall)")
    ax.legend(handles=[Line2D([], [], ls="", marker="o", color=c, label=s) for s, c in HEALTH_COLOURS.items()
                       if s in seen] + ([Line2D([], [], ls="", label="N above a dot: findings")] if counted else []),
              fontsize=7, ncol=4, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)  # (above the lanes)
    fig.tight_layout()
    return ("health", "Health over the run: each host's samples, coloured by status (a number: its findings)", _png(fig))


def _page(summary, plots: list[tuple[str, str, str]]) -> str:
    esc = html.escape
    it_t = summary.iteration_time_s or {}
    share = summary.ep_share_on_circuits
    facts = [("status", summary.status), ("playbook", summary.playbook), ("inventory", summary.inventory),
             ("iterations", f"{summary.iterations} / {summary.iterations_planned}"),
             ("mean iteration time", f"{it_t.get('mean', 0):.3f} s" if it_t else "—"),
             ("tokens/s", f"{summary.tokens_per_s or 0:,.0f}"),
             ("reconfigurations", str(len(summary.reconfigurations))),
             ("EP bytes on circuits", f"{100 * share:.1f} %" if share else "—")]
    ocs = summary.ocs or {}
    for name, o in (ocs.get("by_ocs") or ({"": ocs} if ocs else {})).items():  # each OCS's read-back at the end
        facts.append((f"OCS {name} read-back" if name else "OCS read-back",
                      f"{'matches' if o.get('matches_last_plan') else 'DIFFERS from'} the last plan, "
                      f"{len(o.get('cross_connects') or [])} cross-connects via {o.get('endpoint')}"))
    by_region: dict[str, list[dict]] = {}
    for r in summary.reconfigurations:
        by_region.setdefault(str(r.get("region")), []).append(r)
    if len(by_region) > 1:  # several regions: each one's reconfigurations, and its OCS
        facts += [(f"region {reg}", f"{len(rs)} reconfiguration(s) on OCS {rs[0].get('ocs') or '—'}, "
                                    f"{sum(x.get('outcome', 'applied') == 'applied' for x in rs)} applied")
                  for reg, rs in sorted(by_region.items())]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in facts)
    figs = "".join(f'<figure id="{i}"><figcaption>{esc(t)}</figcaption><img alt="{esc(t)}" src="{u}"></figure>'
                   for i, t, u in plots)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>mfctl run {esc(summary.run_id)}</title>"
            "<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}th{text-align:left;padding-right:1em}"
            "figure{margin:1.5em 0}img{max-width:100%}</style></head><body>"
            f"<h1>mfctl run {esc(summary.run_id)}</h1><table>{body}</table>{figs}"
            # records how many plots the browser decoded (used by the report test; harmless otherwise)
            "<script>window.addEventListener('load',function(){var n=0;document.querySelectorAll('img')"
            ".forEach(function(i){if(i.naturalWidth>0)n++});document.body.setAttribute('data-images-loaded',n);});"
            "</script></body></html>")


def write(run_dir: Path, out: Path | None = None) -> Path:
    out = out or run_dir / "report.html"
    out.write_text(build(run_dir))
    return out
