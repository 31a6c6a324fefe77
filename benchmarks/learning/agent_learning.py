"""The agent's measured learning runs: the seeds table and the ablation figure.

Every run is `python -m tf_vtrace.agent train` in its own process, followed
by `python -m tf_vtrace.agent evaluate` of its SavedModel (greedy and sampled,
20 episodes each) in fresh processes. Results go to a JSON file; `--ablation`
also draws the figure.

    python -m benchmarks.learning.agent_learning seeds --seeds 0 1 ... 9      # make learn-full
    python -m benchmarks.learning.agent_learning ablation --seeds 0 1 2       # make ablation
    python -m benchmarks.learning.agent_learning seeds --seeds 0 1 ... 9 \
        --runs-dir runs/gamma098 --jobs 2 --discount 0.98    # a changed default
    python -m benchmarks.learning.agent_learning compare --seeds 0 1 ... 9 \
        --runs default=runs gamma=runs/gamma098 --out benchmarks/results/agent_compare

`seeds` trains CartPole-v1 with the default Config (300k env steps; `make
learn-full` adds `make demo`'s `--eval-every`: greedy evaluations keeping the
best policy) and prints a markdown table per seed (eval returns of the final and
of the best policy, the env step at which the training return, the mean of
the last 100 episodes, first reached 475, env steps, wall and CPU seconds),
then how many seeds met each target. Flags it does not know are passed to
`train`: the seeds table of a changed setting (give it its own
`--runs-dir`). `--jobs N` trains N seeds at once (each run's wall time
then measures a shared machine).
`compare` trains nothing: it reads the seeds runs of several settings
(`--runs LABEL=RUNS_DIR`, each a `seeds` mode's `--runs-dir`, its seeds by
`--seeds`) and plots each setting's mean training return over the seeds with
a 95 % bootstrap band, printing the targets met per setting.
`ablation` trains V-trace and no correction (ρ = c = 1) at each policy lag
of `--lags`, `--steps` env steps each, and plots the running mean return of the
training episodes (mean over seeds, shaded min–max) in one PNG.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

import numpy as np

from benchmarks.learning import _plotting
from benchmarks.learning._stats import bootstrap_band, return_curve
from tf_vtrace.agent import recording

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Where the figures and records go without --out (`make docs-data` copies
# what the docs show into docs/).
RESULTS = ROOT / "benchmarks" / "results"
# The training return the default config must reach (issue: ≥ 475 within
# its 300k env steps).
TARGET = 475.


def _agent(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "tf_vtrace.agent", *args],
                            env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(result.stdout + result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(out, *flags):
    """Trains into `out`, evaluates greedy and sampled; returns the record
    (kept in ``out/record.json``: a finished run is not trained again)."""
    cached = out / "record.json"
    if cached.exists() and json.loads(cached.read_text())["flags"] == list(flags):
        return json.loads(cached.read_text())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    summary = _agent("train", "--out", str(out), "--no-progress", *flags)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = dict(summary, process_wall_s=round(time.time() - start, 1),
                  process_cpu_s=round(after.ru_utime + after.ru_stime
                                      - before.ru_utime - before.ru_stime, 1))
    for mode in ("greedy", "sampled"):
        extra = ["--sampled"] if mode == "sampled" else []
        record[f"eval_{mode}"] = _agent("evaluate", str(out / "policy"),
                                        "--episodes", "20", *extra)["mean_return"]
    if (out / "policy_best").is_dir():  # Runs with --eval-every.
        record["eval_greedy_best_policy"] = _agent(
            "evaluate", str(out / "policy_best"), "--episodes", "20")["mean_return"]
    record["flags"] = list(flags)
    record["env_steps_to_target"] = steps_to_target(out / "episodes.csv")
    cached.write_text(json.dumps(record))
    print(json.dumps(record), flush=True)
    return record


def steps_to_target(episodes_csv, target=TARGET):
    """The env step at which the mean return of the last 100 training
    episodes (a full window) first reached `target`; None if never."""
    steps, returns = recording.read_episodes(episodes_csv)
    window = recording.RECENT_EPISODES
    reached = recording.running_mean(returns, window) >= target
    reached[:window - 1] = False
    return int(steps[reached.argmax()]) if reached.any() else None


def seeds_table(records):
    """The markdown table of the seeds runs."""
    lines = ["| seed | greedy, best policy (20 new ep.) | kept at env step "
             "| greedy, final policy (20 ep.) | sampled, final policy (20 ep.) "
             f"| training return (last 100) | env steps to {TARGET:.0f} | env steps "
             "| wall s (training process) | CPU s (training process) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        to_target = (f"{r['env_steps_to_target']:,}"
                     if r["env_steps_to_target"] is not None else "not reached")
        best = r.get("eval_greedy_best_policy")
        lines.append(
            f"| {r['seed']} | {'—' if best is None else f'{best:.1f}'} "
            f"| {r.get('eval_best_env_steps') or '—'} "
            f"| {r['eval_greedy']:.1f} | {r['eval_sampled']:.1f} "
            f"| {r['mean_return_last_100']:.1f} | {to_target} | {r['env_steps']:,} "
            f"| {r['process_wall_s']:.0f} | {r['process_cpu_s']:.0f} |")
    return "\n".join(lines)


SETTINGS = (("V-trace", []), ("no correction", ["--no-correction"]))


def seeds_counts(records):
    """How many seeds met each target of the default config's issue."""
    def count(values):
        return sum(v is not None and v >= TARGET for v in values)
    return (f"{len(records)} seeds: training return reached {TARGET:.0f} on "
            f"{sum(r['env_steps_to_target'] is not None for r in records)}; "
            f"greedy >= {TARGET:.0f} with the best policy on "
            f"{count(r.get('eval_greedy_best_policy') for r in records)}, "
            f"with the final policy on "
            f"{count(r['eval_greedy'] for r in records)}")


def plot_seeds(records, runs_dir, png_path, setting="default Config",
               window=100):
    """Per seed: the training return (running mean of `window` episodes)
    and, for runs with evaluations, the greedy evaluations with the kept
    best marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (train_axis, eval_axis) = plt.subplots(1, 2, figsize=(13, 4.5),
                                                   sharey=True)
    colours = plt.get_cmap("tab20")
    for i, r in enumerate(records):
        run_dir = runs_dir / f"seed{r['seed']}"
        steps, returns = recording.read_episodes(run_dir / "episodes.csv")
        train_axis.plot(steps, recording.running_mean(returns, window),
                        color=colours(i % 20), linewidth=1,
                        label=f"seed {r['seed']}")
        steps, means = recording.read_evaluations(run_dir / "evaluations.csv")
        eval_axis.plot(steps, means, ".-", color=colours(i % 20), linewidth=1)
        if r.get("eval_best_env_steps") is not None:
            eval_axis.plot(r["eval_best_env_steps"], r["eval_greedy_best"], "*",
                           color=colours(i % 20), markersize=11,
                           markeredgecolor="black")
    train_axis.set_title(f"training return (mean of last {window} episodes)")
    eval_axis.set_title("greedy evaluation during training (10 episodes; "
                        "★ the kept best)")
    for axis in (train_axis, eval_axis):
        axis.axhline(TARGET, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel("environment steps")
        axis.grid(alpha=0.3)
    train_axis.set_ylabel("return")
    train_axis.legend(fontsize=6, ncol=2, loc="lower right")
    figure.suptitle(f"CartPole-v1, {setting}, {len(records)} seeds")
    figure.tight_layout()
    figure.savefig(png_path, dpi=90)


def _seed_dir(runs_dir, seed):
    """Where `seeds` trains `seed` under its --runs-dir."""
    return pathlib.Path(runs_dir) / "seeds" / f"seed{seed}"


def read_record(runs_dir, seed):
    """The record `seeds` kept for `seed` under `runs_dir` (its --runs-dir)."""
    path = _seed_dir(runs_dir, seed) / "record.json"
    if not path.exists():
        raise FileNotFoundError(f"--runs: no seeds run of seed {seed} at {path}")
    return json.loads(path.read_text())


def plot_comparison(settings, png_path, window=100, points=200):
    """Each setting's training return (running mean of `window` episodes),
    mean over its seeds with a 95 % bootstrap band; `settings` maps a label
    to (runs_dir, records)."""
    rng = np.random.default_rng(0)
    figure, axis = _plotting.pyplot().subplots(figsize=(8, 4.5))
    for label, (runs_dir, records) in settings.items():
        grid = np.linspace(0, min(r["env_steps"] for r in records), points)
        curves = [return_curve(_seed_dir(runs_dir, r["seed"]) / "episodes.csv",
                               grid, window) for r in records]
        reached = sum(r["env_steps_to_target"] is not None for r in records)
        _plotting.band(axis, grid, *bootstrap_band(curves, rng),
                       label=f"{label}: reached {TARGET:.0f} on "
                             f"{reached} of {len(records)}")
    axis.axhline(TARGET, color="grey", linestyle="--", linewidth=0.8)
    axis.set_xlabel("environment steps")
    axis.set_ylabel(f"training return (mean of last {window} episodes)")
    axis.set_title("CartPole-v1: mean over seeds, 95 % bootstrap band")
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(png_path, dpi=90)


def _parse_runs(items, parser):
    settings = {}
    for item in items:
        label, _, runs_dir = item.partition("=")
        if not label or not runs_dir:
            parser.error(f"--runs takes LABEL=RUNS_DIR, got {item!r}")
        settings[label] = runs_dir
    return settings


def compare(args, parser):
    if not args.runs:
        parser.error("compare needs --runs LABEL=RUNS_DIR (two or more)")
    try:
        settings = {label: (runs_dir, [read_record(runs_dir, seed)
                                       for seed in args.seeds])
                    for label, runs_dir in _parse_runs(args.runs, parser).items()}
    except FileNotFoundError as error:
        parser.error(str(error))
    for label, (_, records) in settings.items():
        print(f"{label}: {seeds_counts(records)}")
    stem = pathlib.Path(args.out or (RESULTS / "agent_compare"))
    stem.parent.mkdir(parents=True, exist_ok=True)
    plot_comparison(settings, stem.with_suffix(".png"))


def plot_ablation(records, runs_dir, png_path, window=100):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lags = sorted({r["policy_lag"] for r in records})
    figure, axes = plt.subplots(1, len(lags), figsize=(6 * len(lags), 4),
                                sharey=True, squeeze=False)
    grid = np.linspace(0, max(r["env_steps"] for r in records), 200)
    for axis, lag in zip(axes[0], lags):
        for name, _ in SETTINGS:
            runs = [r for r in records if r["policy_lag"] == lag
                    and r["setting"] == name]
            curves = np.array([return_curve(runs_dir / r["run"] / "episodes.csv",
                                             grid, window) for r in runs])
            evals = ", ".join(f"{r['eval_greedy']:.0f}" for r in runs)
            line, = axis.plot(grid, curves.mean(0),
                              label=f"{name} (greedy eval: {evals})")
            axis.fill_between(grid, curves.min(0), curves.max(0),
                              color=line.get_color(), alpha=0.2)
        axis.set_title(f"CartPole-v1, policy lag {lag}, {len(runs)} seeds")
        axis.set_xlabel("environment steps")
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=8)
    axes[0][0].set_ylabel(f"training return (mean of last {window} episodes)")
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("seeds", "ablation", "compare"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per run (default 500000)")
    parser.add_argument("--lags", type=int, nargs="+", default=[0, 8, 32])
    parser.add_argument("--eval-every", type=int, default=0,
                        help="seeds: greedy evaluations during training")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--out", default=None, help="JSON (and PNG) path stem")
    parser.add_argument("--jobs", type=int, default=1,
                        help="seeds: runs trained at once")
    parser.add_argument("--runs", nargs="+", metavar="LABEL=RUNS_DIR",
                        help="compare: the settings' seeds runs")
    args, train_flags = parser.parse_known_args()
    if train_flags and args.mode != "seeds":
        parser.error(f"unrecognized arguments: {' '.join(train_flags)}")
    if args.mode == "compare":
        return compare(args, parser)
    runs_dir = pathlib.Path(args.runs_dir) / args.mode
    runs_dir.mkdir(parents=True, exist_ok=True)
    records = []
    if args.mode == "seeds":
        steps = ["--total-env-steps", str(args.steps)] if args.steps else []

        def run_seed(seed):
            return run(runs_dir / f"seed{seed}", "--seed", str(seed), *steps,
                       "--eval-every", str(args.eval_every), *train_flags)

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            records = list(pool.map(run_seed, args.seeds))
        print(seeds_table(records))
        print(seeds_counts(records))
    else:
        steps = args.steps or 500_000
        for seed in args.seeds:
            for lag in args.lags:
                for name, flags in SETTINGS:
                    name_ = f"{'vtrace' if not flags else 'nocorr'}_lag{lag}_seed{seed}"
                    record = run(runs_dir / name_, "--seed", str(seed),
                                 "--policy-lag", str(lag),
                                 "--total-env-steps", str(steps), *flags)
                    records.append(dict(record, setting=name, run=name_))
    stem = pathlib.Path(args.out or (RESULTS / f"agent_{args.mode}"))
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(records, indent=1))
    if args.mode == "ablation":
        plot_ablation(records, runs_dir, stem.with_suffix(".png"))
    else:
        plot_seeds(records, runs_dir, stem.with_suffix(".png"),
                   " ".join(train_flags) or "default Config")


if __name__ == "__main__":
    main()
