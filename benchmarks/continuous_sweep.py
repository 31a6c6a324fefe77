"""A short sweep of a continuous preset's settings, one seed per run.

    python benchmarks/continuous_sweep.py run NAME SEED [--FIELD VALUE ...]
    python benchmarks/continuous_sweep.py table

``run`` trains ``--preset pendulum`` (or ``--preset P`` among the flags)
with the flags given, through the CLI in a fresh process, and writes
``benchmarks/results/continuous_sweep/NAME-seedSEED.json``: the flags, the
summary, the training-return curve (the running mean of 100 episodes at
each 10k env steps) and the final mean return of the last 100 episodes.
``table`` prints one row per NAME: the mean over its seeds of that final
return with its 95 % bootstrap band (`learning._stats.bootstrap_band`).
"""

import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from learning._stats import bootstrap_band  # noqa: E402

RESULTS = os.path.join(HERE, "results", "continuous_sweep")
CURVE_EVERY = 10_000


def _curve(episodes_csv):
    data = np.loadtxt(episodes_csv, delimiter=",", skiprows=1, ndmin=2)
    steps, returns = data[:, 0], data[:, 1]
    points = []
    for at in range(CURVE_EVERY, int(steps.max()) + 1, CURVE_EVERY):
        recent = returns[steps <= at][-100:]
        if len(recent):
            points.append([at, round(float(recent.mean()), 2)])
    return points, float(returns[-100:].mean())


def run(name, seed, flags):
    if "--preset" not in flags:
        flags = ["--preset", "pendulum"] + flags
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "tf_vtrace.agent", "train", "--out",
                   out, "--no-progress", "--seed", str(seed)] + flags
        subprocess.run(command, check=True, cwd=tempfile.gettempdir())
        with open(os.path.join(out, "summary.json")) as handle:
            summary = json.load(handle)
        with open(os.path.join(out, "config.json")) as handle:
            config = json.load(handle)
        curve, final = _curve(os.path.join(out, "episodes.csv"))
    os.makedirs(RESULTS, exist_ok=True)
    record = {"name": name, "seed": seed, "flags": flags, "config": config,
              "final_mean_return_last_100": round(final, 2), "curve": curve,
              "summary": summary}
    with open(os.path.join(RESULTS, f"{name}-seed{seed}.json"), "w") as handle:
        json.dump(record, handle, indent=1)
    print(name, seed, round(final, 1), summary["wall_s"], "s")


def table():
    runs = {}
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path) as handle:
            record = json.load(handle)
        runs.setdefault(record["name"], []).append(record)
    rng = np.random.default_rng(0)
    print("| settings | flags | seeds | final return (mean, 95 % band) | "
          "ρ̄-clipped | ESS/N | wall s |")
    print("|---|---|---|---|---|---|---|")
    for name, records in runs.items():
        finals = [r["final_mean_return_last_100"] for r in records]
        mean, low, high = bootstrap_band(finals, rng)
        clipped = np.mean([r["summary"].get("rho_clipped_fraction_last_100") or 0
                           for r in records])
        ess = np.mean([r["summary"].get("ess_fraction_last_100") or 0
                       for r in records])
        wall = np.mean([r["summary"]["wall_s"] for r in records])
        print(f"| {name} | `{' '.join(records[0]['flags'])}` | {len(records)} | "
              f"{mean:.0f} [{low:.0f}, {high:.0f}] | {clipped:.3f} | {ess:.3f} | "
              f"{wall:.0f} |")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        table()
