"""`make bench-agent`: our IMPALA agent against RLlib IMPALA, side by side.

    .venv/bin/python -m benchmarks.peers.bench_agent [--seeds 0 1 2] [--quick]

Both learn CartPole-v1 on the same machine with the same number of envs
(`--num-envs`: the demo's, `Config.num_envs`), one run at a time, alternating which system
goes first from seed to seed so that a slow spell of a shared machine hits
both. Each run is a fresh process, timed from its start (imports, Ray and
the env runners included: what a user waits for):

* ours: ``python -m tf_vtrace.agent train`` with the demo's defaults and
  budget (`--our-env-steps`, `Config.total_env_steps`);
* both step the same envs (`--envs`): gymnasium's NumPy-vectorized
  CartPole (``numpy``, the demo's; RLlib's ``gym_env_vectorize_mode=
  "vector_entry_point"``) or one Python env per copy (``gymnasium``;
  RLlib's default ``"sync"``);
* RLlib: `benchmarks/peers/rllib_impala.py` in the RLlib venv
  (``.venv-bench-rllib``, built by ``make bench-agent`` from
  ``requirements-rllib.txt``), its tuned CartPole IMPALA settings, stopped
  when RLlib's own mean return of the last 100 episodes reaches the target
  or at `--rllib-env-steps` / `--max-seconds`.

For each run it reports env steps/s and learner steps/s (after the first
learner update: start-up is in the wall time, not in the rates), the env
steps and the wall time until the mean training return of the last 100
episodes first reaches `--target` (450), and the wall time of the whole
run. Ours is read from the run's own ``episodes.csv`` (exact env step) and
TensorBoard events (wall clock of the ``episode/mean_return`` scalars,
interpolated at that step); RLlib's from its per-iteration lines. It writes
a table (stdout and ``bench_agent.md``), ``bench_agent.json`` and a plot of
the mean return against wall time and env steps (``bench_agent.png``) into
`--out` (benchmarks/results/bench_agent; `make docs-data` copies them into
the docs), with the
machine load before and after each run.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks import harness
from tf_vtrace.agent.config import Config

RLLIB_PY = ".venv-bench-rllib/bin/python"
OURS = "tf_vtrace"
RLLIB = "RLlib IMPALA"
# Running-mean window of the target: the last 100 training episodes.
WINDOW = 100


def _load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def first_reach(steps, means, target):
    """Index of the first `means` ≥ `target` (None if never).

    Examples:
      >>> first_reach([10, 20, 30], [100., 460., 470.], 450.)
      1
    """
    hits = np.flatnonzero(np.asarray(means, np.float64) >= target)
    return int(hits[0]) if len(hits) else None


def _tensorboard_clock(run_dir):
    """(env steps, wall times) of the run's ``episode/mean_return`` events."""
    import tensorflow as tf
    steps, walls = [], []
    directory = os.path.join(run_dir, "tensorboard")
    for name in sorted(os.listdir(directory)):
        for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            if any(v.tag == "episode/mean_return" for v in event.summary.value):
                steps.append(event.step)
                walls.append(event.wall_time)
    return np.asarray(steps, np.float64), np.asarray(walls, np.float64)


# Our `Config.vector_env` → RLlib's `gym_env_vectorize_mode`, the same envs.
RLLIB_VECTORIZE_MODES = {"numpy": "vector_entry_point", "gymnasium": "sync"}


# From our runs' summary.json: the fractions of the wall time (once warm)
# the learner and the actors waited, and the policy lag in updates.
PIPELINE_KEYS = ("learner_idle_fraction", "actor_idle_fraction",
                 "policy_lag_mean")


def run_ours(seed, args, out_dir):
    """One training run of ours; returns its record."""
    from tf_vtrace.agent import recording
    run_dir = os.path.join(out_dir, f"ours-seed{seed}")
    command = [sys.executable, "-m", "tf_vtrace.agent", "train",
               "--out", run_dir, "--restart", "--no-progress",
               "--seed", str(seed), "--num-envs", str(args.num_envs),
               "--total-env-steps", str(args.our_env_steps),
               "--vector-env", args.envs]
    load_before, start = _load(), time.time()
    result = subprocess.run(command, capture_output=True, text=True,
                            timeout=args.max_seconds + 600)
    wall = time.time() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    steps, returns = recording.read_episodes(os.path.join(run_dir, "episodes.csv"))
    means = recording.running_mean(returns, WINDOW)
    reach = first_reach(steps, means, args.target)
    tb_steps, tb_walls = _tensorboard_clock(run_dir)
    curve_walls = np.interp(steps, tb_steps, tb_walls) - start
    return {
        "system": OURS, "seed": seed, "command": " ".join(command[1:]),
        "env_steps_per_s": summary["env_steps_per_s"],
        "learner_steps_per_s": summary["learner_steps_per_s"],
        "env_steps": summary["env_steps"], "wall_s": round(wall, 1),
        "steps_to_target": None if reach is None else int(steps[reach]),
        "wall_to_target_s": (None if reach is None
                             else round(float(curve_walls[reach]), 1)),
        "curve": _thin(curve_walls, steps, means),
        "load_before": load_before, "load_after": _load(),
        **{key: summary[key] for key in PIPELINE_KEYS},
    }


def run_rllib(seed, args, out_dir):
    """One training run of RLlib IMPALA; returns its record."""
    command = [RLLIB_PY, os.path.join("benchmarks", "peers", "rllib_impala.py"),
               "--seed", str(seed), "--num-envs", str(args.num_envs),
               "--target", str(args.target),
               "--vectorize-mode", RLLIB_VECTORIZE_MODES[args.envs],
               "--max-env-steps", str(args.rllib_env_steps),
               "--max-seconds", str(args.max_seconds)]
    load_before, start = _load(), time.time()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    result = subprocess.run(command, capture_output=True, text=True, env=env,
                            timeout=args.max_seconds + 600)
    wall = time.time() - start
    lines = [json.loads(line) for line in result.stdout.splitlines()
             if line.startswith("{")]
    with open(os.path.join(out_dir, f"rllib-seed{seed}.log"), "w") as handle:
        handle.write(result.stdout + "\n" + result.stderr)
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    # Seconds from our clock's start: the script counts from its own start.
    offset = wall - lines[-1]["wall_s"] if lines else 0.
    walls = np.array([line["wall_s"] for line in lines]) + max(offset, 0.)
    steps = np.array([line["env_steps"] for line in lines], np.float64)
    means = np.array([np.nan if line["return_mean"] is None
                      else line["return_mean"] for line in lines])
    reach = first_reach(steps, np.nan_to_num(means, nan=-np.inf), args.target)
    # Rates after the first iteration that trained (start-up excluded).
    first = next((i for i, line in enumerate(lines)
                  if (line["learner_updates"] or 0) > 0), 0)
    elapsed = walls[-1] - walls[first]
    updates = [line["learner_updates"] or 0 for line in lines]
    return {
        "system": RLLIB, "seed": seed, "command": " ".join(command),
        "env_steps_per_s": (round((steps[-1] - steps[first]) / elapsed, 1)
                            if elapsed > 0 else None),
        "learner_steps_per_s": (round((updates[-1] - updates[first]) / elapsed, 2)
                                if elapsed > 0 else None),
        "env_steps": int(steps[-1]), "wall_s": round(wall, 1),
        "steps_to_target": None if reach is None else int(steps[reach]),
        "wall_to_target_s": None if reach is None else round(float(walls[reach]), 1),
        "curve": _thin(walls, steps, means),
        "load_before": load_before, "load_after": _load(),
        **dict.fromkeys(PIPELINE_KEYS),  # Not reported by RLlib's runs.
    }


def _thin(walls, steps, means, points=400):
    """At most `points` (wall s, env steps, mean return) rows for the plot."""
    index = np.unique(np.linspace(0, len(steps) - 1, min(points, len(steps)))
                      .astype(int)) if len(steps) else []
    return [[round(float(walls[i]), 2), int(steps[i]),
             None if np.isnan(means[i]) else round(float(means[i]), 1)]
            for i in index]


def table(records):
    """The results as a markdown table, one row per run plus medians."""
    header = ["system", "seed", "env steps/s", "learner steps/s",
              f"env steps to {WINDOW}-ep. mean ≥ target", "wall s to target",
              "wall s (run)", "learner idle", "actor idle", "policy lag",
              "load before → after"]
    columns = (("env_steps_per_s", 0), ("learner_steps_per_s", 1),
               ("steps_to_target", 0), ("wall_to_target_s", 1), ("wall_s", 1),
               ("learner_idle_fraction", 3), ("actor_idle_fraction", 3),
               ("policy_lag_mean", 2))
    rows = [[r["system"], str(r["seed"]),
             *(_fmt(r[key], digits) for key, digits in columns),
             f"{r['load_before']} → {r['load_after']}"] for r in records]
    for system in (OURS, RLLIB):
        mine = [r for r in records if r["system"] == system]
        if mine:
            rows.append([f"**{system} median**", "", *(
                _fmt(_median(mine, key), digits) for key, digits in columns), ""])
    lines = ["| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# Issue 19's goals, against RLlib IMPALA on the same seed.
MIN_RATE_RATIO, MIN_RATE = 5., 25_000  # env steps/s
MAX_WALL_RATIO = 0.5  # wall time to the target
MAX_IDLE = 0.10  # each side's idle fraction


def goals(records):
    """Issue 19's goals per seed, each with what was measured and whether
    it was met, as a markdown table (a seed without our run: no row)."""
    runs = {(r["system"], r["seed"]): r for r in records}
    header = ["seed",
              f"env steps/s vs RLlib (goal ≥ {MIN_RATE_RATIO:g}×, ≥ {MIN_RATE:,})",
              f"wall s to target vs RLlib (goal ≤ {MAX_WALL_RATIO:g}×)",
              f"learner idle (goal ≤ {MAX_IDLE:.0%})",
              f"actor idle (goal ≤ {MAX_IDLE:.0%})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (system, seed), ours in sorted(runs.items(), key=lambda kv: kv[0][1]):
        if system != OURS:
            continue
        theirs = runs.get((RLLIB, seed))
        cells = [str(seed), _rate_goal(ours, theirs), _wall_goal(ours, theirs),
                 *(_idle_goal(ours[f"{side}_idle_fraction"])
                   for side in ("learner", "actor"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _verdict(measured, met):
    return f"{measured}: {'met' if met else '**missed**'}"


def _rate_goal(ours, theirs):
    rate = ours["env_steps_per_s"]
    if theirs is None:
        return _verdict(f"{rate:,.0f}/s, no RLlib run", rate >= MIN_RATE)
    ratio = rate / theirs["env_steps_per_s"]
    return _verdict(f"{ratio:.1f}×", ratio >= MIN_RATE_RATIO and rate >= MIN_RATE)


def _wall_goal(ours, theirs):
    mine = ours["wall_to_target_s"]
    if mine is None:
        return _verdict("target not reached", False)
    if theirs is None:
        return "— (no RLlib run)"
    if theirs["wall_to_target_s"] is None:
        return _verdict("RLlib did not reach it", True)
    ratio = mine / theirs["wall_to_target_s"]
    return _verdict(f"{ratio:.3f}×", ratio <= MAX_WALL_RATIO)


def _idle_goal(fraction):
    if fraction is None:
        return "— (not measured)"
    return _verdict(f"{fraction:.1%}", fraction <= MAX_IDLE)


def _median(records, key):
    values = [r[key] for r in records]
    if any(v is None for v in values):
        return None  # A run that never reached the target, or RLlib's idle: none.
    return float(np.median(values))


def _fmt(value, digits):
    return "—" if value is None else f"{value:,.{digits}f}"


def plot(records, path, target):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    colours = {OURS: "tab:blue", RLLIB: "tab:orange"}
    for record in records:
        curve = np.array([[w, s, np.nan if m is None else m]
                          for w, s, m in record["curve"]], np.float64)
        label = f"{record['system']} seed {record['seed']}"
        for axis, column in zip(axes, (0, 1)):
            axis.plot(curve[:, column], curve[:, 2], color=colours[record["system"]],
                      alpha=0.4 + 0.2 * (record["seed"] % 3), label=label)
    for axis, xlabel in zip(axes, ("wall seconds from process start",
                                   "environment steps")):
        axis.axhline(target, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(f"mean return, last {WINDOW} training episodes")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    figure.suptitle("CartPole-v1: tf_vtrace vs RLlib IMPALA (same envs, same machine)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=Config.num_envs)
    parser.add_argument("--target", type=float, default=450.)
    parser.add_argument("--envs", default="numpy",
                        choices=sorted(RLLIB_VECTORIZE_MODES),
                        help="the vector env both systems step")
    parser.add_argument("--our-env-steps", type=int,
                        default=Config.total_env_steps)
    parser.add_argument("--rllib-env-steps", type=int, default=3_000_000)
    parser.add_argument("--max-seconds", type=float, default=1200.)
    parser.add_argument("--systems", nargs="+", default=[OURS, RLLIB],
                        choices=[OURS, RLLIB])
    parser.add_argument("--quick", action="store_true",
                        help="one seed, small budgets (a smoke run)")
    parser.add_argument("--out", default=os.path.join(harness.RESULTS_DIR,
                                                      "bench_agent"))
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.our_env_steps = args.seeds[:1], 20_000
        args.rllib_env_steps, args.max_seconds = 20_000, 300.
    if RLLIB in args.systems and not os.path.exists(RLLIB_PY):
        parser.error(f"{RLLIB_PY} is missing: run `make bench-agent`, which "
                     "builds it")
    os.makedirs(args.out, exist_ok=True)
    runners = {OURS: run_ours, RLLIB: run_rllib}
    records = []
    for i, seed in enumerate(args.seeds):
        order = args.systems if i % 2 == 0 else args.systems[::-1]
        for system in order:
            print(f"seed {seed}: {system} ... (load {_load()})", flush=True)
            records.append(runners[system](seed, args, args.out))
            record = records[-1]
            print(f"  {record['env_steps_per_s']} env steps/s, "
                  f"{record['wall_to_target_s']} s to {args.target:g}, "
                  f"{record['wall_s']} s in all", flush=True)
    report = f"{table(records)}\n\nIssue 19's goals, per seed:\n\n{goals(records)}"
    print(report)
    destination = args.out
    with open(os.path.join(destination, "bench_agent.json"), "w") as handle:
        json.dump({"argv": sys.argv, "nproc": os.cpu_count(),
                   "records": records}, handle, indent=1)
    with open(os.path.join(destination, "bench_agent.md"), "w") as handle:
        handle.write(page(report, sys.argv))
    plot(records, os.path.join(destination, "bench_agent.png"), args.target)
    return 0


def page(report, argv):
    """The markdown page of one sitting: what ran, the table, the plot."""
    return (
        "# Agent benchmark: tf_vtrace against RLlib IMPALA\n\n"
        "Written by `make bench-agent` (benchmarks/peers/bench_agent.py); "
        "how to read it and the goals: [Performance](performance.md).\n\n"
        "Command: `python -m benchmarks.peers.bench_agent "
        f"{' '.join(argv[1:])}` on {os.cpu_count()} cores.\n\n"
        f"{report}\n\n![mean training return against wall time and env "
        "steps](bench_agent.png)\n")


if __name__ == "__main__":
    sys.exit(main())
