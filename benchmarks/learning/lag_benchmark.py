"""The policy-lag benchmark: each off-policy correction × policy lag × seed.

    python -m benchmarks.learning.lag_benchmark quick --out runs/lag-quick  # make lag-benchmark
    python -m benchmarks.learning.lag_benchmark full                       # make lag-benchmark-full
    python -m benchmarks.learning.lag_benchmark space-invaders  # make lag-benchmark-space-invaders

Every run trains one agent in this process (`tf_vtrace.agent`'s actor,
learner and `WeightHistory`, the loop of `tf_vtrace.agent.train` without its
checkpoints and export) with the actor acting on weights `lag` learner
updates old, in turn with the learner (the synchronous loop: the lag is
exactly `lag`); the lag ``natural`` is the asynchronous default instead
(`Config.backend` ``"thread"``: the actor acts while the learner learns,
and the lag is whatever that gives, measured per update and reported).
It writes ``runs/<env>/<correction>-lag<L>-seed<S>.json`` under
`--out` (the episodes' returns against env steps, and per update the
measured ρ-clip fraction, ESS/N = (Σρ)² / (N Σρ²) over the N = T·B steps of
the batch, and KL(μ ‖ π)); a finished run is not trained again. Then it
writes `lag_benchmark.json` (every run's summary and its curve on a common
grid), `lag_benchmark.png` (returns against env steps, one panel per env ×
lag, the mean over seeds with a 95 % bootstrap band over seeds) and
`lag_benchmark.md` (the table of final returns with ρ-clip fraction and
ESS/N next to them). `full` (CartPole and MinAtar Breakout) writes those
three into benchmarks/results/, `space-invaders` (the third env, MinAtar
SpaceInvaders) as benchmarks/results/lag_benchmark_space_invaders.*;
``--name NAME`` writes NAME.{json,png,md} instead (a part of the plan beside
the full report, as docs/records/lag_benchmark_minatar.md). `make docs-data`
copies the reports into the docs.

Settings (`ENVS`): the learning rate and batch are chosen so that lag has
room to hurt. A lag is counted in learner updates, and Adam moves each weight
by about the learning rate per update, so what a lag does depends on
updates × step size. The CartPole demo's 1e-3 with 32 × 20 steps per update
left even lag-32 data nearly on-policy (KL(μ‖π) 0.003, mean ρ 1.00); here
CartPole takes lr 3e-3 with 8 envs × 20 steps (4x the updates per env step,
3x the step size), and MinAtar Breakout and SpaceInvaders lr 1e-3 with
16 envs × 20 steps.

Cost, measured on the 2-core machine: `full --jobs 2` (two training
processes, each with one TensorFlow thread of each pool: `--threads`) ran
the whole plan, 200 runs, in 66 min by one command (5 December 2026,
22:34–23:40 UTC, nothing else running but a package install in its first
minutes): CartPole 4.1–9.7 s a run (median 5.1), MinAtar Breakout
53–101 s (median 72); docs/records/lag_benchmark.md. `space-invaders --jobs 2`:
100 runs of 94–131 s (median 111), 89 min (6 December 2026; four runs from
a pilot, a niced job beside it); docs/records/lag_benchmark_space_invaders.md.
A `full` process runs CartPole then Breakout: before a fix of 5 December
(docs/records/performance.md), a learner built after one of other shapes
recompiled its XLA loss at every update and the Breakout runs stalled.
Use `--envs`,
`--lags`, `--seeds`, `--corrections` for a part (runs of the same `--out`
add up: a finished run is read, not trained again), `--name` to report it
beside the full report, and `--report-only` to report what is on disk.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)

from benchmarks.learning import _plotting  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from benchmarks.learning._stats import bootstrap_band  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent import backends, policy_lag  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent import envs as envs_lib  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent import learner as learner_lib  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent.config import CORRECTIONS, Config  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent.presets import DEFAULTS_AS_MEASURED  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)
from tf_vtrace.agent.train import actor_learner_step  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL)

# The lag of the asynchronous pipeline, as it comes (not set).
NATURAL = "natural"
# Every plan was measured with Adam, the gradient clipped to norm 0.5 and a
# queue of one unroll (pinned: `Config`'s defaults changed since).
ENVS = {
    "CartPole-v1": dict(DEFAULTS_AS_MEASURED, num_envs=8, unroll_length=20,
                        learning_rate=3e-3, total_env_steps=100_000),
    "MinAtar/Breakout-v1": dict(DEFAULTS_AS_MEASURED, num_envs=16, unroll_length=20,
                                learning_rate=1e-3, total_env_steps=1_000_000),
    # The third env: a second MinAtar game (Asterix, tried first, did not
    # learn in 1M env steps at these settings: final return 0.8-1.0).
    "MinAtar/SpaceInvaders-v1": dict(DEFAULTS_AS_MEASURED, num_envs=16, unroll_length=20,
                                     learning_rate=1e-3,
                                     total_env_steps=1_000_000),
}
# quick: a smoke test of the whole path (4 updates a run, no XLA: compiling
# would take most of its time), not a measurement.
MODES = {
    "quick": dict(envs=("CartPole-v1",), corrections=CORRECTIONS,
                  lags=(0, 16, NATURAL),
                  seeds=(0, 1), total_env_steps=4 * 8 * 20, jit_compile=False,
                  name="lag_benchmark"),
    "full": dict(envs=("CartPole-v1", "MinAtar/Breakout-v1"),
                 corrections=CORRECTIONS, lags=(0, 4, 16, 64, NATURAL),
                 seeds=(0, 1, 2, 3, 4), total_env_steps=None, jit_compile=True,
                 name="lag_benchmark"),
}
# The third env's plan on its own: its 100 runs took 89 minutes with
# `--jobs 2` (6 December 2026), so with it `full` would take about 2.6 hours
# on 2 cores, past the 2 hours `full` is held to.
MODES["space-invaders"] = dict(MODES["full"], envs=("MinAtar/SpaceInvaders-v1",),
                               name="lag_benchmark_space_invaders")
DIAGNOSTICS = ("rho_clipped_fraction", "ess_fraction", "kl", "mean_rho",
               "policy_lag")


def parse_lag(text):
    """A policy lag of the command line: an integer >= 0 or ``natural``."""
    if text == NATURAL:
        return NATURAL
    try:
        lag = int(text)
    except ValueError:
        lag = -1
    if lag < 0:
        raise argparse.ArgumentTypeError(
            f"a policy lag is an integer >= 0 or {NATURAL!r}, got {text!r}")
    return lag


def lag_order(lag):
    """Sort key: the set lags in order, then the natural one."""
    return (lag == NATURAL, 0 if lag == NATURAL else lag)


# Final return: the mean of the episodes in the last 10 % of env steps.
FINAL_FRACTION = 0.1


def run_config(env_id, correction, lag, seed, plan):
    natural = lag == NATURAL
    settings = dict(ENVS[env_id], env_id=env_id, correction=correction,
                    policy_lag=0 if natural else lag, seed=seed,
                    jit_compile=plan["jit_compile"],
                    backend="thread" if natural else "local")
    if plan["total_env_steps"]:
        settings["total_env_steps"] = plan["total_env_steps"]
    return Config(**settings)


def train_run(config):
    """One run: returns its record (episodes, per-update diagnostics)."""
    start = time.time()
    actor = backends.make_actors(config)
    learner = learner_lib.Learner(
        config, envs_lib.env_spaces(config.env_id)[0], actor.head_sizes)
    history = policy_lag.WeightHistory(config.policy_lag)
    history.push(learner.version, learner.get_weights())
    episodes, updates = {"env_steps": [], "returns": []}, {k: [] for k in DIAGNOSTICS}
    try:
        for update in range(1, config.num_updates + 1):
            unroll, diagnostics = actor_learner_step(actor, learner, history)
            steps = update * config.steps_per_update
            episodes["returns"] += unroll["episode_returns"].tolist()
            episodes["env_steps"] += [steps] * len(unroll["episode_returns"])
            for key in DIAGNOSTICS:
                updates[key].append(diagnostics[key])
    finally:
        actor.close()
    return {"env_id": config.env_id, "correction": config.correction,
            "policy_lag": config_lag(config), "seed": config.seed,
            "env_steps": config.num_updates * config.steps_per_update,
            "wall_s": round(time.time() - start, 1), "config": config.to_dict(),
            "episodes": episodes, "updates": updates}


def config_lag(config):
    """The lag a run was set to: an int, or `NATURAL`."""
    return NATURAL if config.backend == "thread" else config.policy_lag


def final_return(record):
    steps, returns = (np.asarray(record["episodes"][k])
                      for k in ("env_steps", "returns"))
    late = steps > (1 - FINAL_FRACTION) * record["env_steps"]
    return float(returns[late].mean() if late.any() else returns[-1:].mean()
                 if len(returns) else np.nan)


def late_mean(record, key):
    """The mean of a per-update diagnostic over the second half of the run."""
    values = np.asarray(record["updates"][key])
    return float(values[len(values) // 2:].mean())


def measured_lag(record):
    """The mean policy lag of the second half of the run's updates (a
    synchronous run of an earlier version, which did not record it: the lag
    it was set to, exact in that loop)."""
    if "policy_lag" not in record["updates"]:
        return float(record["policy_lag"])
    return late_mean(record, "policy_lag")


def run_path(out, config):
    name = f"{config.correction}-lag{config_lag(config)}-seed{config.seed}.json"
    return out / "runs" / config.env_id.replace("/", "_") / name


def run_all(plan, out, train=True, shard=(0, 1)):
    """Trains (or reloads) every run of `plan`, a progress line per run.
    Seeds are the outer loop: a partial run has every setting on its seeds.
    With `train` False, only the runs already on disk are read. `shard`
    (i, n): only every n-th run from the i-th (one of n processes)."""
    configs = [run_config(env_id, correction, lag, seed, plan)
               for seed in plan["seeds"] for env_id in plan["envs"]
               for lag in plan["lags"] for correction in plan["corrections"]]
    configs = configs[shard[0]::shard[1]]
    records, missing = [], []
    for index, config in enumerate(configs, 1):
        path = run_path(out, config)
        # Compared as JSON: tuples come back as lists.
        wanted = json.loads(json.dumps(config.to_dict()))
        if path.exists() and json.loads(path.read_text())["config"] == wanted:
            record = json.loads(path.read_text())
        elif not train:
            print(f"[{index}/{len(configs)}] {path.name}: not run", flush=True)
            missing.append(f"{config.env_id} {path.stem}")
            continue
        else:
            record = train_run(config)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))
        records.append(record)
        print(f"[{index}/{len(configs)}] {config.env_id} {config.correction} "
              f"lag {config_lag(config)} seed {config.seed}: final return "
              f"{final_return(record):.1f}, ρ-clip "
              f"{late_mean(record, 'rho_clipped_fraction'):.3f}, ESS/N "
              f"{late_mean(record, 'ess_fraction'):.3f}, {record['wall_s']} s",
              flush=True)
    return records, missing


# --- The report: JSON, figure, table ------------------------------------------

GRID_POINTS = 40


def curve(record, grid):
    """Mean return of the episodes ending in each grid bin (carried forward
    over empty bins; NaN before the first episode)."""
    steps, returns = (np.asarray(record["episodes"][k], float)
                      for k in ("env_steps", "returns"))
    values, last = [], np.nan
    for low, high in zip(np.concatenate([[0.], grid[:-1]]), grid):
        in_bin = (steps > low) & (steps <= high)
        last = returns[in_bin].mean() if in_bin.any() else last
        values.append(last)
    return np.asarray(values)


def _groups(records):
    keys = sorted({(r["env_id"], r["policy_lag"]) for r in records},
                  key=lambda k: (list(ENVS).index(k[0]), lag_order(k[1])))
    return {key: {c: [r for r in records if (r["env_id"], r["policy_lag"]) == key
                      and r["correction"] == c] for c in CORRECTIONS}
            for key in keys}


def summarize(records):
    """One row per env × lag × correction: final return with its band, the
    late ρ-clip fraction, ESS/N and KL (means over seeds), and the curves."""
    rng, rows = np.random.default_rng(0), []
    for (env_id, lag), by_correction in _groups(records).items():
        budget = max(r["env_steps"] for r in sum(by_correction.values(), []))
        grid = np.linspace(budget / GRID_POINTS, budget, GRID_POINTS)
        for correction, runs in by_correction.items():
            if not runs:
                continue
            mean, low, high = bootstrap_band([final_return(r) for r in runs], rng)
            band = bootstrap_band([curve(r, grid) for r in runs], rng)
            rows.append({
                "env_id": env_id, "policy_lag": lag, "correction": correction,
                "seeds": [r["seed"] for r in runs], "final_return": float(mean),
                "final_return_ci95": [float(low), float(high)],
                **{key: float(np.mean([late_mean(r, key) for r in runs]))
                   for key in ("rho_clipped_fraction", "ess_fraction", "kl")},
                "measured_lag": float(np.mean([measured_lag(r) for r in runs])),
                "grid_env_steps": grid.tolist(),
                "curve_mean": band[0].tolist(), "curve_ci95_low": band[1].tolist(),
                "curve_ci95_high": band[2].tolist()})
    return rows


def plot(rows, png_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env_id"] for r in rows))
    lags = sorted({r["policy_lag"] for r in rows}, key=lag_order)
    figure, axes = plt.subplots(len(envs), len(lags), squeeze=False,
                                figsize=(3.6 * len(lags), 3 * len(envs)))
    for i, env_id in enumerate(envs):
        for j, lag in enumerate(lags):
            axis = axes[i][j]
            for row in rows:
                if (row["env_id"], row["policy_lag"]) != (env_id, lag):
                    continue
                x = np.asarray(row["grid_env_steps"])
                # One colour per correction in every panel.
                _plotting.band(axis, x, row["curve_mean"], row["curve_ci95_low"],
                               row["curve_ci95_high"], label=row["correction"],
                               color=f"C{CORRECTIONS.index(row['correction'])}")
            axis.set_title(f"{env_id}, lag {lag}", fontsize=9)
            axis.set_xlabel("env steps")
        axes[i][0].set_ylabel("training return")
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png_path, dpi=90)
    plt.close(figure)


def table(rows):
    lines = ["| env | lag | correction | seeds | final return [95 % CI] "
             "| measured lag | ρ-clip fraction | ESS/N | KL(μ‖π) |",
             "|---|---:|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        low, high = r["final_return_ci95"]
        lines.append(
            f"| {r['env_id']} | {r['policy_lag']} | {r['correction']} "
            f"| {len(r['seeds'])} | {r['final_return']:.1f} [{low:.1f}, {high:.1f}] "
            f"| {r['measured_lag']:.2f} | {r['rho_clipped_fraction']:.3f} "
            # (+ 0.: a KL that rounds to zero from below prints as 0.0000)
            f"| {r['ess_fraction']:.3f} | {round(r['kl'], 4) + 0.:.4f} |")
    return "\n".join(lines)


PAGE = """# The policy-lag benchmark

Generated by `benchmarks/learning/lag_benchmark.py` (`make lag-benchmark-full`
for CartPole and MinAtar Breakout, `make lag-benchmark-space-invaders` for the
third env; `make lag-benchmark` is the quick smoke version): every off-policy correction
of `tf_vtrace.agent.corrections` (V-trace, none, 1-step importance sampling,
ε-correction) at each policy lag, with the settings of its `ENVS` (why those
learning rates: see the script's doc). Final return: the mean training return
(sampled actions) of the episodes in the last {final:.0%} of env steps, mean
over seeds, with a 95 % bootstrap interval over seeds. ρ-clip fraction (steps
with ρ > ρ̄ = 1), ESS/N = (Σρ)² / (N Σρ²) per batch of N = T·B steps, and
KL(μ‖π): means over the second half of each run's updates, then over seeds;
so is the measured lag (learner version − the unroll's policy version): the
set lag in the synchronous loop, what acting while learning gives for the
lag `natural` (the asynchronous default, `Config.backend` "thread").

Command: `{command}`; {runs} runs, {run_wall:.0f} s of training wall time
summed over the runs (each run's own in `{name}.json`, `runs`), this
command {wall:.0f} s from its start to this report (runs already on disk
are read, not trained again; `--jobs N` trains in N processes at once);
machine load at the end (`/proc/loadavg`): `{load}`. {missing}

![returns against env steps]({name}.png)

{table}
"""


def write_report(records, missing, out, command, wall_s, name="lag_benchmark"):
    """Writes `name`.{json,png,md} into `out`; `missing` names the runs of
    the plan that were not run (``--report-only``)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(records)
    (out / f"{name}.json").write_text(json.dumps(
        {"command": command, "wall_s": round(wall_s, 1), "missing": missing,
         "rows": rows,
         "runs": [{k: v for k, v in r.items() if k not in ("episodes", "updates")}
                  for r in records]}, indent=1))
    plot(rows, out / f"{name}.png")
    with open("/proc/loadavg") as handle:
        load = " ".join(handle.read().split()[:3])
    (out / f"{name}.md").write_text(PAGE.format(name=name,
        final=FINAL_FRACTION, command=command, runs=len(records), wall=wall_s,
        run_wall=sum(r["wall_s"] for r in records),
        load=load, table=table(rows),
        missing=(f"Runs of this plan not run: {', '.join(missing)}."
                 if missing else "Every run of this plan was run.")))


def parse_shard(text):
    """``i/n`` with 0 <= i < n."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"a shard is i/n with 0 <= i < n, got {text!r}")
    return index, count


def threads_per_job(jobs):
    """TensorFlow threads for each of `jobs` processes: the cores shared out
    (TensorFlow's default gives every process pools as large as the
    machine). One comparison on 2 cores, two MinAtar runs side by side: 71 s
    each with the default pools, 62 s with one thread each; the whole plan
    with one thread each then ran its Breakout runs in a median 72 s
    (5 December 2026; not an A/B)."""
    return max(1, (os.cpu_count() or 1) // jobs)


def train_in_processes(jobs, argv):
    """Trains the plan of `argv` in `jobs` processes at once (each run in one
    of them, `--shard`, on its share of the cores); raises naming a process
    that failed."""
    threads = str(threads_per_job(jobs))
    children = [subprocess.Popen([sys.executable, "-m", __spec__.name, *argv,
                                  "--shard", f"{i}/{jobs}", "--threads", threads])
                for i in range(jobs)]
    codes = [child.wait() for child in children]
    failed = [f"--shard {i}/{jobs} (exit status {code})"
              for i, code in enumerate(codes) if code]
    if failed:
        raise RuntimeError(f"training processes failed: {', '.join(failed)}; "
                           "their runs finished so far are on disk (rerun "
                           "to continue)")


def set_threads(count):
    """Sizes TensorFlow's thread pools; before any op runs (they are fixed then)."""
    tf.config.threading.set_intra_op_parallelism_threads(count)
    tf.config.threading.set_inter_op_parallelism_threads(count)


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="runs and results (full, space-invaders: "
                             "runs/lag-benchmark, results into benchmarks/results/)")
    for key in ("envs", "corrections", "lags", "seeds"):
        parser.add_argument("--" + key, nargs="+", default=None,
                            type={"lags": parse_lag, "seeds": int}.get(key, str),
                            choices={"envs": tuple(ENVS),
                                     "corrections": CORRECTIONS}.get(key),
                            help=f"instead of the mode's {key}")
    parser.add_argument("--steps", type=int, default=None,
                        help="env steps per run (default: the mode's / ENVS')")
    parser.add_argument("--name", default=None,
                        help="the report's file names (NAME.md, .png, "
                             ".json; default: the mode's): e.g. a part of "
                             "the plan "
                             "beside the full report")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: report the runs already on disk")
    parser.add_argument("--jobs", type=int, default=1,
                        help="training processes at once (each run in one; "
                             "on 2 cores 2 finish the plan sooner than 1)")
    parser.add_argument("--shard", type=parse_shard, default=None,
                        help="i/n: train only every n-th run from the i-th, "
                             "and report nothing (what --jobs starts)")
    parser.add_argument("--threads", type=int, default=None,
                        help="TensorFlow intra- and inter-op threads of this "
                             "process (default: TensorFlow's; --jobs N gives "
                             "its processes cores / N each)")
    return parser


def parse_command_line(parser, argv=None):
    """`(argv, args)`: `argv` (the command line's by default) as a list and
    parsed by `parser`, whose ``--jobs`` must be >= 1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    return argv, args


def main(argv=None):
    parser = build_parser()
    argv, args = parse_command_line(parser, argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        set_threads(args.threads)
    plan = dict(MODES[args.mode])
    plan.update({key: getattr(args, key) for key in
                 ("envs", "corrections", "lags", "seeds")
                 if getattr(args, key) is not None})
    plan["total_env_steps"] = args.steps or plan["total_env_steps"]
    name = args.name or plan["name"]
    out = args.out or ROOT / "runs" / "lag-benchmark"
    docs = out if args.out or args.mode == "quick" else ROOT / "benchmarks" / "results"
    start = time.time()
    if args.shard is not None:
        print(f"--shard {args.shard[0]}/{args.shard[1]}: TensorFlow threads "
              f"{tf.config.threading.get_intra_op_parallelism_threads()} "
              f"intra-op, {tf.config.threading.get_inter_op_parallelism_threads()}"
              " inter-op", flush=True)
        run_all(plan, out, shard=args.shard)
        return
    train = not args.report_only
    if train and args.jobs > 1:
        # The children get the same arguments: `--shard` comes first.
        train_in_processes(args.jobs, argv)
        train = False
    records, missing = run_all(plan, out, train=train)
    if not records:
        parser.error(f"no run of this plan is on disk under {out}")
    write_report(records, missing, docs, command=" ".join(["lag_benchmark.py"] + argv),
        wall_s=time.time() - start, name=name)
    print(f"wrote {docs / (name + '.md')} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
