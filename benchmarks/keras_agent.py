"""The Keras agent's measured runs (examples/keras_fit.py): table and curve.

`run` trains one seed of the full example (500k env steps) in this process
and writes its result, with the machine load before and after, to
``benchmarks/results/keras_agent_seed<S>.json``; `report` gathers those
files into ``benchmarks/results/keras_agent.json``, prints the markdown table and draws
``benchmarks/results/keras_agent.png`` (the greedy return after each epoch and the mean
return of the epoch's training episodes, against env steps, per seed).

    python benchmarks/keras_agent.py run --seed 0
    python benchmarks/keras_agent.py run --seed 1
    python benchmarks/keras_agent.py report
"""

import argparse
import json
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]


def _load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(seed):
    import keras_fit
    load_before = _load()
    result = keras_fit.main(keras_fit.Args(seed=seed))
    result.update(load_before=load_before, load_after=_load(),
                  cpus=os.cpu_count())
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"keras_agent_seed{seed}.json"
    path.write_text(json.dumps(result, indent=1))
    print(path)


def report():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [json.loads(p.read_text())
            for p in sorted(RESULTS.glob("keras_agent_seed*.json"))]
    (RESULTS / "keras_agent.json").write_text(json.dumps(runs, indent=1))
    print("| seed | greedy, kept weights, new episodes | greedy, last epoch "
          "| kept epoch | env steps | wall s | env steps/s | mean policy lag "
          "| load before → after |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['seed']} | {r['greedy_return']:.1f} | "
              f"{r['last_epoch_greedy_return']:.1f} | {r['best_epoch']} | "
              f"{r['env_steps']:,} | {r['wall_s']:.0f} | {r['env_steps_per_s']:,} "
              f"| {r['policy_lag']:.2f} | {r['load_before']} → {r['load_after']} |")
    # One panel per curve, every seed thin and their median thick: with ten
    # seeds a legend entry per line would cover the curves.
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for axis, key, title in zip(
            axes, ("greedy_return", "episode_return"),
            ("greedy policy after each epoch (20 episodes)",
             "training episodes of each epoch (mean)")):
        for r in runs:
            axis.plot([s / 1000 for s in r["curve"]["env_steps"]], r["curve"][key],
                      color="tab:blue", alpha=0.3, linewidth=0.8)
        steps = runs[0]["curve"]["env_steps"]
        if all(r["curve"]["env_steps"] == steps for r in runs):
            axis.plot([s / 1000 for s in steps],
                      np.median([r["curve"][key] for r in runs], axis=0),
                      color="black", linewidth=2, label=f"median of {len(runs)} seeds")
            axis.legend(fontsize=8, loc="lower right")
        axis.axhline(475, color="grey", linewidth=0.8)
        axis.set(xlabel="env steps (thousands)", title=title)
        axis.title.set_fontsize(9)
    axes[0].set_ylabel("return")
    figure.suptitle("examples/keras_fit.py on CartPole-v1, one thin line per seed",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(RESULTS / "keras_agent.png", dpi=100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "report"))
    parser.add_argument("--seed", type=int, default=0)
    flags = parser.parse_args()
    run(flags.seed) if flags.command == "run" else report()
