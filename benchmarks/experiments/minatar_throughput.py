"""MinAtar throughput: the environment's own limit against the whole agent.

Three rates in env steps/s, each printed as a JSON line with the load
(`/proc/loadavg`) before and after it:

* ``env``: `tf_vtrace.agent.envs.make_vector_env` (gymnasium's
  `SyncVectorEnv` of B MinAtar envs, sticky actions) stepped with uniform
  random actions, nothing else;
* ``act``: the agent's own actor (`tf_vtrace.agent.actor.LocalActor`: the
  envs plus the policy's compiled inference and the action sampling per
  step, the unroll's arrays) collecting unrolls with fixed weights, no
  learning: what one actor process can feed a learner at most;
* ``agent``: ``python -m tf_vtrace.agent train`` (a subprocess) for
  `--agent-steps` env steps, its ``summary.json``'s ``env_steps_per_s``
  (the rate after the first update), for each ``--backends`` entry.

``--rounds`` repeats the three in turn (alternating, so that a change of the
machine's load shows as a spread rather than a bias).

    python -m benchmarks.experiments.minatar_throughput --rounds 2
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from tf_vtrace.agent import envs as envs_lib
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.presets import PRESETS


def _load():
    with open("/proc/loadavg") as handle:
        return handle.read().split()[:3]


def env_rate(env_id, num_envs, seconds):
    envs, _ = envs_lib.make_vector_env(env_id, num_envs, seed=0)
    rng = np.random.default_rng(0)
    n = int(envs.single_action_space.n)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(rng.integers(0, n, num_envs))
        steps += num_envs
    rate = steps / (time.perf_counter() - start)
    envs.close()
    return rate


def act_rate(config, seconds):
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import learner as learner_lib
    actor = actor_lib.LocalActor(config)
    learner = learner_lib.Learner(config, envs_lib.env_spaces(config.env_id)[0],
                                  actor.head_sizes)
    actor.set_weights(learner.get_weights(), 0)
    actor.collect()  # compiles the inference
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actor.collect()
        steps += config.steps_per_update
    rate = steps / (time.perf_counter() - start)
    actor.close()
    return rate


def agent_rate(preset, steps, backend_flags):
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "tf_vtrace.agent", "train", "--preset",
                   preset, "--total-env-steps", str(steps), "--out", out,
                   "--no-progress", *backend_flags]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as handle:
            summary = json.load(handle)
    return summary["env_steps_per_s"], summary["learner_idle_fraction"], command


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="minatar-breakout")
    parser.add_argument("--seconds", type=float, default=20.)
    parser.add_argument("--agent-steps", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=None,
                        help="envs per actor (default: the preset's)")
    parser.add_argument("--backends", nargs="*",
                        default=["thread", "process:2"],
                        help="thread, or process:N (N actor processes); none: no agent runs")
    args = parser.parse_args()
    overrides = {} if args.num_envs is None else {"num_envs": args.num_envs}
    config = Config(**dict(PRESETS[args.preset], backend="local", **overrides))
    env_flags = [] if args.num_envs is None else ["--num-envs", str(args.num_envs)]
    for round_ in range(args.rounds):
        for kind in ["env", "act"] + [f"agent/{b}" for b in args.backends]:
            before = _load()
            extra = {}
            if kind == "env":
                rate = env_rate(config.env_id, config.num_envs, args.seconds)
            elif kind == "act":
                rate = act_rate(config, args.seconds)
            else:
                name, _, actors = kind.split("/")[1].partition(":")
                flags = ["--backend", name] + (
                    ["--num-actors", actors] if actors else [])
                rate, idle, command = agent_rate(args.preset, args.agent_steps,
                                                 flags + env_flags)
                extra = dict(learner_idle_fraction=idle,
                             command=" ".join(command[1:]))
            print(json.dumps(dict(round=round_, kind=kind, env_steps_per_s=round(rate),
                                  num_envs=config.num_envs, load_before=before,
                                  load_after=_load(), **extra)), flush=True)


if __name__ == "__main__":
    main()
