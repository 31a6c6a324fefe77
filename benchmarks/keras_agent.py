"""The Keras agent's measured runs (examples/keras_fit.py): table and curve.

`run` trains one seed of the full example (500k env steps) in this process
and writes its result, with the machine load before and after, to
``benchmarks/results/keras_agent_seed<S>.json``; `report` gathers those
files into ``docs/keras_agent.json``, prints the markdown table and draws
``docs/keras_agent.png`` (the greedy return after each epoch and the mean
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
    (ROOT / "docs" / "keras_agent.json").write_text(json.dumps(runs, indent=1))
    print("| seed | greedy, kept weights, new episodes | greedy, last epoch "
          "| kept epoch | env steps | wall s | env steps/s | mean policy lag "
          "| load before → after |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['seed']} | {r['greedy_return']:.1f} | "
              f"{r['last_epoch_greedy_return']:.1f} | {r['best_epoch']} | "
              f"{r['env_steps']:,} | {r['wall_s']:.0f} | {r['env_steps_per_s']:,} "
              f"| {r['policy_lag']:.2f} | {r['load_before']} → {r['load_after']} |")
    figure, axis = plt.subplots(figsize=(6, 3.5))
    for r in runs:
        steps = [s / 1000 for s in r["curve"]["env_steps"]]
        line, = axis.plot(steps, r["curve"]["greedy_return"], marker=".",
                          label=f"seed {r['seed']}: greedy")
        axis.plot(steps, r["curve"]["episode_return"], alpha=0.5,
                  linestyle="--", color=line.get_color(),
                  label=f"seed {r['seed']}: training episodes")
    axis.axhline(475, color="grey", linewidth=0.8)
    axis.set(xlabel="env steps (thousands)", ylabel="return",
             title="examples/keras_fit.py on CartPole-v1")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(ROOT / "docs" / "keras_agent.png", dpi=100)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "report"))
    parser.add_argument("--seed", type=int, default=0)
    flags = parser.parse_args()
    run(flags.seed) if flags.command == "run" else report()
