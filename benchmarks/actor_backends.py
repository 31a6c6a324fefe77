"""Throughput and policy lag of each actor backend (docs/howto/actors.md).

For every backend setting (local 1 actor; thread 1; process 1 and 2; Ray 1
and 2) and
every repeat, in turn, so that a change in the machine's load hits them all:

* with the learner: the real train loop (`tf_vtrace.agent.train.train`, the
  demo's CartPole-v1 Config, `--steps` env steps) reports env steps/s and
  learner steps/s from the end of its first update on (which compiles the
  learner step and waits for the actors), and the policy lag of the unrolls
  it learned on (mean, max);
* actor only: the backend alone, once every actor has given an unroll,
  `collect` for `--actor-seconds`: env steps/s with no learner competing.

Prints the medians over the repeats (with min–max) and the ratio of each
median to the local backend's, measured in the same run; writes every
measurement to `--out` (JSON).

    python -m benchmarks.actor_backends --out benchmarks/results/actor_backends.json
    python -m benchmarks.actor_backends --quick --settings local process:1
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from tf_vtrace.agent import backends
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config

SETTINGS = ("local", "thread", "process:1", "process:2", "ray:1", "ray:2")
# Actor-only waits this long at most for every actor to give its first unroll.
_START_TIMEOUT_S = 300.


def config_of(setting, **changes):
    """The demo Config with the backend and actors of "backend[:actors]"."""
    backend, _, actors = setting.partition(":")
    return Config(backend=backend, num_actors=int(actors or 1), **changes)


def with_learner(config):
    """The train loop's warm rates and policy lag (from its summary)."""
    with tempfile.TemporaryDirectory(prefix="actor_backends_") as out:
        summary = train_lib.train(config, out, progress=False)
    keys = ("env_steps_per_s", "learner_steps_per_s", "policy_lag_mean",
            "policy_lag_max", "unrolls_per_actor")
    return {key: summary[key] for key in keys}


def actor_only(config, seconds):
    """Env steps/s of the backend alone, after every actor has started."""
    # The thread backend acts only the run's updates' unrolls: give it many.
    config = config.replace(total_env_steps=10 ** 9)
    actors = backends.make_actors(config)
    try:
        actors.set_weights(_initial_weights(config, actors.head_sizes), 0)
        deadline = time.time() + _START_TIMEOUT_S
        actors.collect()
        while (min(getattr(actors, "unrolls_per_actor", [1])) == 0
               and time.time() < deadline):
            actors.collect()
        unrolls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            actors.collect()
            unrolls += 1
        elapsed = time.perf_counter() - start
    finally:
        actors.close()
    return {"actor_env_steps_per_s": round(
        unrolls * config.steps_per_update / elapsed, 1)}


def _initial_weights(config, head_sizes):
    from tf_vtrace.agent import envs, networks
    observation_space, _ = envs.env_spaces(config.env_id)
    return networks.build_network(observation_space, head_sizes,
                                  config.hidden_sizes,
                                  seed=config.seed).get_weights()


METRICS = ("env_steps_per_s", "learner_steps_per_s", "actor_env_steps_per_s",
           "policy_lag_mean", "policy_lag_max")


def table(records, settings):
    """Markdown: the median (min–max) of each metric, and the ratio of the
    throughput medians to the first setting's."""
    medians = {s: {m: float(np.median([r[m] for r in records[s]]))
                   for m in METRICS} for s in settings}
    base = medians[settings[0]]
    lines = ["| backend | actors | env steps/s (with learner) | × local "
             "| learner steps/s | actor-only env steps/s | × local "
             "| policy lag mean | lag max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for setting in settings:
        values = {m: [r[m] for r in records[setting]] for m in METRICS}
        med = medians[setting]

        def cell(metric, digits=0, values=values, med=med):
            low, high = min(values[metric]), max(values[metric])
            return (f"{med[metric]:.{digits}f} "
                    f"({low:.{digits}f}–{high:.{digits}f})")
        backend, _, actors = setting.partition(":")
        lines.append(
            f"| {backend} | {actors or 1} | {cell('env_steps_per_s')} "
            f"| {med['env_steps_per_s'] / base['env_steps_per_s']:.2f} "
            f"| {cell('learner_steps_per_s', 1)} "
            f"| {cell('actor_env_steps_per_s')} "
            f"| {med['actor_env_steps_per_s'] / base['actor_env_steps_per_s']:.2f} "
            f"| {cell('policy_lag_mean', 2)} | {cell('policy_lag_max')} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS),
                        help="backend[:actors], the first is the baseline")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=32_000,
                        help="env steps of each train-loop run")
    parser.add_argument("--actor-seconds", type=float, default=4.)
    parser.add_argument("--quick", action="store_true",
                        help="tiny runs: checks the harness, not the speed")
    parser.add_argument("--out", default=None, help="JSON of every measurement")
    args = parser.parse_args(argv)
    changes = {"total_env_steps": args.steps}
    if args.quick:
        changes = dict(total_env_steps=96, num_envs=4, unroll_length=8,
                       jit_compile=False)
        args.repeats, args.actor_seconds = 1, 0.5
    records = {setting: [] for setting in args.settings}
    for repeat in range(args.repeats):
        for setting in args.settings:
            config = config_of(setting, **changes)
            record = dict(with_learner(config),
                          **actor_only(config, args.actor_seconds))
            records[setting].append(record)
            print(f"repeat {repeat} {setting}: {json.dumps(record)}", flush=True)
    print(f"\nCartPole-v1, {config.num_envs} envs × T={config.unroll_length} "
          f"per actor, {args.steps if not args.quick else 96} env steps per "
          f"train run, medians of {args.repeats} (min–max), "
          f"{os.cpu_count()} CPUs")
    print(table(records, args.settings))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(
            {"settings": args.settings, "repeats": args.repeats,
             "steps": args.steps, "quick": args.quick, "records": records},
            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
