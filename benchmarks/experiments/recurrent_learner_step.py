"""The recurrent learner step's cost against the feed-forward one.

At the demo's sizes (`--num-envs`, default the `Config`'s 16, × 20 steps,
CartPole, widths (64, 64); the LSTM network: a torso of (64, 64), an LSTM
of `--core-size` units), each learner
is warmed up (compiled) on a real unroll of its own actor, then timed in
alternating rounds of `--steps` updates, so that both see the same load.
Prints one JSON line: the median seconds per step of each and their ratio.

    python -m benchmarks.experiments.recurrent_learner_step --rounds 5
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np


def _learner_and_unroll(config):
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    space, action_space = envs.env_spaces(config.env_id)
    learner = learner_lib.Learner(config, space, envs.head_sizes(action_space))
    actor = actor_lib.LocalActor(config)
    actor.set_weights(learner.get_weights(), 0)
    unroll = actor.collect()
    actor.close()
    learner.step(unroll)  # compile
    return learner, unroll


def main():
    from tf_vtrace.agent.config import Config
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--core-size", type=int, default=64)
    parser.add_argument("--num-envs", type=int, default=Config.num_envs)
    parser.add_argument("--env-id", default="CartPole-v1")
    args = parser.parse_args()
    base = Config(env_id=args.env_id, num_envs=args.num_envs, unroll_length=20)
    kinds = {"feed_forward": base,
             "lstm": base.replace(core="lstm", core_size=args.core_size)}
    learners = {k: _learner_and_unroll(c) for k, c in kinds.items()}
    times = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind, (learner, unroll) in learners.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                learner.step(unroll)
            times[kind].append((time.perf_counter() - start) / args.steps)
    medians = {k: float(np.median(v)) for k, v in times.items()}
    print(json.dumps({
        "step_s": {k: round(v, 5) for k, v in medians.items()},
        "rounds_s": {k: [round(x, 5) for x in v] for k, v in times.items()},
        "ratio_lstm_over_ff": round(medians["lstm"] / medians["feed_forward"], 3),
        "core_size": args.core_size, "num_envs": args.num_envs,
        "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
