"""LSTM against MLP on CartPole without velocities (issue 22's memory task).

Each run is `python -m tf_vtrace.agent train --preset stateless-cartpole`
(``tf_vtrace/StatelessCartPole-v0``, observations: cart position and pole
angle only; the preset's LSTM core with a separate value pathway), or the
same settings with the feed-forward MLP (``--core none
--separate-value-core false``), then a greedy and
a sampled evaluation of its SavedModel (20 episodes each, fresh processes;
the recurrent policy's ``act`` carries its state). Writes a JSON of the
records, a markdown table and a PNG (training return per run, the greedy
evaluations in the legend).

    # make stateless-benchmark:
    python -m benchmarks.learning.stateless_cartpole --seeds 0 1 2 --steps 1000000
    # without the preset (the Config defaults, the earlier measurement):
    python -m benchmarks.learning.stateless_cartpole --preset none \
        --runs-dir runs/stateless-cartpole-defaults
    # keeping the best policy of greedy evaluations every 50k env steps:
    python -m benchmarks.learning.stateless_cartpole --eval-every 50000
    # smoke:
    python -m benchmarks.learning.stateless_cartpole --seeds 0 --steps 20000
"""

import argparse
import json
import pathlib

import numpy as np

from benchmarks.learning.agent_learning import run
from tf_vtrace.agent import recording
from tf_vtrace.agent.envs import STATELESS_CARTPOLE_ID

PRESET = "stateless-cartpole"
# The preset's core, or the MLP with the preset's other settings.
CORES = (("LSTM", ["--core", "lstm"]),
         ("MLP", ["--core", "none", "--separate-value-core", "false"]))


def table(records):
    lines = ["| network | seed | greedy, best policy (20 new ep.) | kept at env step "
             "| eval greedy (20 ep.) | eval sampled (20 ep.) "
             "| training return (last 100) | env steps | wall s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        best = r.get("eval_greedy_best_policy")
        lines.append(
            f"| {r['network']} | {r['seed']} "
            f"| {'—' if best is None else f'{best:.1f}'} "
            f"| {r.get('eval_best_env_steps') or '—'} "
            f"| {r['eval_greedy']:.1f} "
            f"| {r['eval_sampled']:.1f} | {r['mean_return_last_100']:.1f} "
            f"| {r['env_steps']:,} | {r['process_wall_s']:.0f} |")
    return "\n".join(lines)


def plot(records, runs_dir, png_path, window=100):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(8, 4.5))
    colors = {"LSTM": "tab:blue", "MLP": "tab:orange"}
    for r in records:
        steps, returns = recording.read_episodes(
            runs_dir / r["run"] / "episodes.csv")
        axis.plot(steps, recording.running_mean(returns, window),
                  color=colors[r["network"]], alpha=0.8,
                  label=f"{r['network']} seed {r['seed']} "
                        f"(greedy eval {r['eval_greedy']:.0f}"
                        + (f"; best policy {r['eval_greedy_best_policy']:.0f}"
                           if "eval_greedy_best_policy" in r else "") + ")")
    axis.set_title(f"{STATELESS_CARTPOLE_ID} (position and angle only)")
    axis.set_xlabel("environment steps")
    axis.set_ylabel(f"training return (mean of last {window} episodes)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--preset", default=PRESET,
                        help="the train preset of both networks' runs "
                             "('none': the Config defaults)")
    parser.add_argument("--baseline-cost", type=float, default=None,
                        help="both networks' Config.baseline_cost (default: "
                             "Config's)")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="greedy evaluations during training, the best "
                             "policy kept (Config.eval_every)")
    parser.add_argument("--runs-dir", default="runs/stateless-cartpole")
    parser.add_argument("--out", default=None,
                        help="JSON and PNG path stem (default: in --runs-dir)")
    args = parser.parse_args()
    runs_dir = pathlib.Path(args.runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    records = []
    common = ([] if args.preset == "none" else ["--preset", args.preset])
    if args.baseline_cost is not None:
        common += ["--baseline-cost", str(args.baseline_cost)]
    if args.eval_every:
        common += ["--eval-every", str(args.eval_every)]
    for seed in args.seeds:
        for name, flags in CORES:
            name_dir = f"{name.lower()}-seed{seed}"
            record = run(runs_dir / name_dir, "--env-id", STATELESS_CARTPOLE_ID,
                         "--seed", str(seed), "--total-env-steps",
                         str(args.steps), *flags, *common)
            records.append(dict(record, network=name, seed=seed, run=name_dir))
    stem = pathlib.Path(args.out) if args.out else runs_dir / "stateless_cartpole"
    stem.with_suffix(".json").write_text(json.dumps(records, indent=1))
    plot(records, runs_dir, stem.with_suffix(".png"))
    print(table(records))
    for name, _ in CORES:
        for key in ("eval_greedy", "eval_greedy_best_policy"):
            evals = [r[key] for r in records
                     if r["network"] == name and key in r]
            if evals:
                print(f"{name} {key}: min {np.min(evals):.1f}, "
                      f"mean {np.mean(evals):.1f} over {len(evals)} seeds")


if __name__ == "__main__":
    main()
