"""Cost of the learner's non-finite guard (the `tf.cond` around the update).

    .venv/bin/python -m benchmarks.experiments.learner_nonfinite_guard [--rounds 10]

One `tf_vtrace.agent.learner.Learner` step on a CartPole unroll of the demo's
shape (T=20, B=32, XLA on), with the guard (the library's step) and without
(the same learner with `_apply` calling Adam unconditionally, as before the
guard). The two alternate in rounds of 50 steps after a warm-up, so machine
noise is shared; it prints the median ms per step of each and their ratio.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import envs
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent.config import Config


class UnguardedLearner(learner_lib.Learner):
    """The learner step without the guard: Adam applies whatever it gets."""

    def _apply(self, loss, diagnostics, gradients):
        self.optimizer.apply_gradients(
            zip(gradients, self.model.trainable_variables))
        return dict(diagnostics, loss=loss,
                    gradient_norm=tf.linalg.global_norm(gradients),
                    update_skipped=tf.constant(0.))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    config = Config()
    actor = actor_lib.LocalActor(config)
    observation_space, _ = envs.env_spaces(config.env_id)
    learners = {name: cls(config, observation_space, actor.head_sizes)
                for name, cls in (("guarded", learner_lib.Learner),
                                  ("unguarded", UnguardedLearner))}
    actor.set_weights(learners["guarded"].get_weights(), 0)
    unroll = actor.collect()
    for learner in learners.values():
        for _ in range(5):  # trace + compile
            learner.step(unroll)
    times = {name: [] for name in learners}
    for _ in range(args.rounds):
        for name, learner in learners.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                learner.step(unroll)
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    medians = {name: float(np.median(t)) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:10s} {median:7.3f} ms/step (rounds: "
              f"{', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"ratio guarded/unguarded: {medians['guarded'] / medians['unguarded']:.3f}")
    with open("/proc/loadavg") as handle:
        print("loadavg:", handle.read().strip())


if __name__ == "__main__":
    main()
