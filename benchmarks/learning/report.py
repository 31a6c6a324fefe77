"""The learning benchmarks' report: tables, one figure, and the docs' copy.

`write` turns a plan's finished runs (`benchmarks.learning.runner`'s
``result.json``) into ``<plan>_benchmark.{json,png,md}``: per panel (env)
and setting the final training return (the mean of each run's last 100
episodes), mean over seeds with a 95 % bootstrap band over seeds
(`_stats.bootstrap_band`), the wall time per run and env steps/s; the goals
(`references.Goal`) met or missed by the mean curve over seeds; the
published references with their protocols and sources; and a figure with a
panel per env: the curves (mean over seeds with the band, return against
env steps) and the references as marks labelled with their protocol.

``python -m benchmarks.learning.report fill PAGE --results DIR --images DIR``
(`make docs-data`) fills each ``<!-- benchmark: NAME -->`` …
``<!-- /benchmark: NAME -->`` block of a docs page with NAME's tables and
figure (its JSON in DIR/NAME/), leaving the blocks of benchmarks not run yet
as they are.
"""

import argparse
import json
import os
import pathlib
import re

import numpy as np

from benchmarks.learning import _plotting
from benchmarks.learning._stats import bootstrap_band
from benchmarks.learning.references import steps_text

PROTOCOL = ("Final training return: the mean return of each run's last 100 "
            "training episodes (sampled actions), then the mean over seeds with "
            "a 95 % bootstrap interval over seeds. Curves: the running mean of "
            "100 episodes against env steps, mean over seeds with the same band. "
            "Wall time: all the run's training processes (a resumed run has "
            "several); env steps/s: env steps over that wall time.")


def stem(plan_name):
    """The report's file name stem: ``minatar`` → ``minatar_benchmark``."""
    return plan_name.replace("-", "_") + "_benchmark"


def _curve(result, grid):
    curve = result["curve"]
    values = np.array([np.nan if v is None else v for v in curve["return"]])
    return np.interp(grid, curve["env_steps"], values)


def summarize(plan, results):
    """One row per panel × setting with finished runs, in the plan's order."""
    rng, rows = np.random.default_rng(0), []
    for panel in plan.panels:
        for setting in plan.settings:
            # (A run that ended before its first episode has no return.)
            runs = [r for r in results if (r["panel"], r["setting"]) == (panel, setting)
                    and r["final_return"] is not None]
            if not runs:
                continue
            grid = np.linspace(0, min(r["env_steps"] for r in runs), 101)[1:]
            finals = [r["final_return"] for r in runs]
            mean, low, high = bootstrap_band(finals, rng)
            band = bootstrap_band([_curve(r, grid) for r in runs], rng)
            walls = [r["wall_s"] for r in runs]
            rows.append({
                "panel": panel, "setting": setting,
                "seeds": [r["seed"] for r in runs],
                "planned_seeds": sorted({run.seed for run in plan.runs
                                         if (run.panel, run.setting) == (panel, setting)}),
                "env_steps": min(r["env_steps"] for r in runs),
                "final_return": float(mean), "final_return_ci95": [float(low), float(high)],
                "final_returns": finals,
                "wall_s_median": float(np.median(walls)),
                "wall_s_range": [min(walls), max(walls)],
                "env_steps_per_s": float(np.mean([r["env_steps_per_s"] for r in runs])),
                "grid_env_steps": grid.tolist(), "curve_mean": band[0].tolist(),
                "curve_ci95_low": band[1].tolist(), "curve_ci95_high": band[2].tolist()})
    return rows


def goal_outcome(goal, row):
    """What the mean curve over seeds of `row` says of `goal`."""
    grid, mean = np.asarray(row["grid_env_steps"]), np.asarray(row["curve_mean"])
    if goal.env_steps > grid[-1] * 1.001:
        return {"measured": None, "met": None,
                "text": f"not measured (runs end at {steps_text(int(grid[-1]))})"}
    if goal.by == "at":
        value = float(np.interp(goal.env_steps, grid, mean))
        return {"measured": value, "met": value >= goal.value,
                "text": f"{value:.1f} at {steps_text(goal.env_steps)}"}
    early = mean[grid <= goal.env_steps * 1.001]
    reached = np.nonzero(early >= goal.value)[0]
    best = float(np.nanmax(early))
    text = (f"reached at {steps_text(int(grid[reached[0]]))}" if len(reached)
            else f"best {best:.1f}")
    return {"measured": best, "met": bool(len(reached)), "text": text}


def _hours(seconds):
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def tables(plan, rows):
    """The Markdown tables: results, goals, references."""
    lines = ["| env | setting | seeds | env steps | final training return, mean "
             "[95 % CI] | per seed | wall time per run, median (range) | env steps/s |",
             "|---|---|---:|---:|---|---|---|---:|"]
    for r in rows:
        low, high = r["final_return_ci95"]
        seeds = f"{len(r['seeds'])} of {len(r['planned_seeds'])}"
        lines.append(
            f"| {r['panel']} | {r['setting']} | {seeds} | {steps_text(r['env_steps'])} "
            f"| {r['final_return']:.1f} [{low:.1f}, {high:.1f}] "
            f"| {', '.join(f'{v:.1f}' for v in r['final_returns'])} "
            f"| {_hours(r['wall_s_median'])} ({_hours(r['wall_s_range'][0])}–"
            f"{_hours(r['wall_s_range'][1])}) | {r['env_steps_per_s']:,.0f} |")
    main = plan.settings[0]
    goal_lines = []
    for goal in plan.goals:
        row = next((r for r in rows if (r["panel"], r["setting"]) == (goal.panel, main)), None)
        outcome = goal_outcome(goal, row) if row else {"met": None, "text": "not run yet"}
        met = {True: "met", False: "**missed**", None: "—"}[outcome["met"]]
        goal_lines.append(f"| {goal.panel} | {goal.text()} | {outcome['text']} | {met} |")
    if goal_lines:
        lines += ["", f"Goals (mean training return over seeds, {main}):", "",
                  "| env | goal | measured | |", "|---|---|---|---|", *goal_lines]
    refs = [ref for ref in plan.references if ref.panel in plan.panels]
    if refs:
        lines += ["", "Published references:", "",
                  "| env | return | env steps | by | protocol | source |",
                  "|---|---:|---:|---|---|---|"]
        lines += [f"| {ref.panel} | {ref.value:g} | {steps_text(ref.env_steps)} "
                  f"| {ref.label} | {ref.protocol} | {ref.source} |" for ref in refs]
    return "\n".join(lines)


_MARKERS = "os^vD<pPXh"


def _draw_panel(axis, plan, panel, rows, sources, handles):
    """One env's panel: our settings' curves with bands (its legend), the
    references as marks and the goals as ★ (into `handles`, by source)."""
    right = max(r["grid_env_steps"][-1] for r in rows if r["panel"] == panel)
    ours = [_plotting.band(axis, row["grid_env_steps"], row["curve_mean"],
                           row["curve_ci95_low"], row["curve_ci95_high"],
                           color=f"C{plan.settings.index(row['setting'])}",
                           label=f"{row['setting']} ({len(row['seeds'])} seeds)")
            for row in rows if row["panel"] == panel]
    marks = [(ref, (ref.label, ref.protocol),
              _MARKERS[sources.index((ref.label, ref.protocol)) % len(_MARKERS)],
              f"{ref.label}: {ref.protocol}", "at")
             for ref in plan.references if ref.panel == panel]
    marks += [(goal, "goal", "*", "our goal (mean training return over seeds, at or "
               "within its env steps)", goal.by) for goal in plan.goals if goal.panel == panel]
    for mark, key, marker, label, by in marks:
        beyond = mark.env_steps > right * 1.05
        goal = key == "goal"
        handles[key] = axis.plot(
            right if beyond else mark.env_steps, mark.value, marker, linestyle="none",
            color="crimson" if goal else "black", markersize=10 if goal else 7,
            markerfacecolor=None if goal else "none", zorder=3 if goal else 4,
            label=label)[0]
        if beyond:
            axis.annotate(f"{by} {steps_text(mark.env_steps)}", (right, mark.value),
                          textcoords="offset points", xytext=(-8, -10 if goal else 4),
                          ha="right", fontsize=6)
    axis.set_title(panel, fontsize=9)
    axis.set_xlabel("env steps")
    axis.grid(alpha=0.3)
    axis.legend(handles=ours, fontsize=6, loc="best")


def plot(plan, rows, png_path):
    """A panel per env (`_draw_panel`), the references' legend below."""
    plt = _plotting.pyplot()
    panels = [p for p in plan.panels if any(r["panel"] == p for r in rows)]
    columns = min(3, len(panels))
    count = -(-len(panels) // columns)
    figure, axes = plt.subplots(count, columns, squeeze=False,
                                figsize=(max(4.6 * columns, 8), 3.4 * count + 1.4))
    sources = list(dict.fromkeys((ref.label, ref.protocol) for ref in plan.references
                                 if ref.panel in panels))
    handles = {}
    for axis, panel in zip(axes.flat, panels):
        _draw_panel(axis, plan, panel, rows, sources, handles)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for row_axes in axes:
        row_axes[0].set_ylabel("training return (last 100 episodes)")
    figure.legend(handles=list(handles.values()), loc="lower center", fontsize=7,
                  ncol=2, frameon=False)
    figure.suptitle(f"{plan.title}: ours (mean over seeds, 95 % bootstrap band) "
                    "and published references", fontsize=10)
    figure.tight_layout(rect=(0, 0.04 + 0.025 * -(-len(handles) // 2), 1, 0.97))
    figure.savefig(png_path, dpi=90)
    plt.close(figure)


def write(plan, results, missing, out, wall_s, command):
    """Writes ``<stem>.{json,png,md}`` into `out`; returns the page's path.
    `missing`: the plan's runs not finished."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name, rows = stem(plan.name), summarize(plan, results)
    (out / f"{name}.json").write_text(json.dumps({
        "plan": plan.name, "command": command, "wall_s": round(wall_s, 1),
        "missing": [run.label for run in missing],
        "rows": rows, "runs": [{k: v for k, v in r.items() if k != "curve"}
                               for r in results]}, indent=1))
    plot(plan, rows, out / f"{name}.png")
    with open("/proc/loadavg") as handle:
        load = " ".join(handle.read().split()[:3])
    state = (f"Runs not finished: {', '.join(run.label for run in missing)}."
             if missing else "Every run of the plan finished.")
    (out / f"{name}.md").write_text(
        f"# {plan.title}\n\nGenerated by `benchmarks/learning/runner.py` "
        f"(`{command}`; this invocation {wall_s:.0f} s, machine load at its end "
        f"`{load}`). {PROTOCOL} {state}\n\n![curves]({name}.png)\n\n"
        f"{tables(plan, rows)}\n")
    return out / f"{name}.md"


def fill(page, results, images):
    """Fills the page's benchmark blocks whose results exist; returns the
    names filled."""
    from benchmarks.learning import plans
    page = pathlib.Path(page)
    text, filled = page.read_text(), []
    for name in re.findall(r"<!-- benchmark: ([\w-]+) -->", text):
        data = pathlib.Path(results) / name / f"{stem(name)}.json"
        if not data.exists():
            continue
        rows = json.loads(data.read_text())["rows"]
        image = os.path.relpath(pathlib.Path(images) / f"{stem(name)}.png", page.parent)
        block = (f"<!-- benchmark: {name} -->\n\n![{plans.PLANS[name].title}]({image})\n\n"
                 f"{tables(plans.PLANS[name], rows)}\n\n<!-- /benchmark: {name} -->")
        old = re.search(rf"<!-- benchmark: {name} -->.*?<!-- /benchmark: {name} -->",
                        text, flags=re.S)
        text = text[:old.start()] + block + text[old.end():]
        filled.append(name)
    page.write_text(text)
    return filled


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("fill",))
    parser.add_argument("pages", nargs="+", type=pathlib.Path)
    parser.add_argument("--results", type=pathlib.Path, required=True,
                        help="the runner's results (one folder per plan)")
    parser.add_argument("--images", type=pathlib.Path, required=True,
                        help="where the figures are copied for the pages")
    args = parser.parse_args(argv)
    for page in args.pages:
        for name in fill(page, args.results, args.images):
            print(f"docs-data: {name} into {page}")


if __name__ == "__main__":
    main()
