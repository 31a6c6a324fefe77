"""Learner steps/s: one device vs MirroredStrategy over logical CPU devices.

    python -m benchmarks.distributed_learner [--devices 2] [--steps 200] [--rounds 3]

One process with `--devices` logical CPU devices; the one-device Learner
(``strategy="none"``, XLA-compiled step), the same without XLA
(``none_no_xla``: a step spanning devices cannot be XLA-compiled, so this
separates the cost of losing XLA from that of distribution) and the mirrored
one (``strategy="mirrored"``) alternate for `--rounds` rounds of `--steps`
`Learner.step` calls each on a real CartPole unroll at the demo's shapes
(T = 20, B = 32, MLP 64-64), so that both see the same machine load. Prints
one JSON line per round and the ratio mirrored / none. Logical CPU devices
share the host's cores: this measures the distribution's overhead, not a
speed-up (that needs real devices or hosts).
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def steps_per_second(learner, unroll, steps):
    learner.step(unroll)  # trace and compile outside the timing
    start = time.perf_counter()
    for _ in range(steps):
        learner.step(unroll)
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    from tf_vtrace.agent.config import Config

    config = Config()
    space, _ = envs.env_spaces(config.env_id)
    actor = actor_lib.LocalActor(config)
    variants = {"none": config, "none_no_xla": config.replace(jit_compile=False),
                "mirrored": config.replace(strategy="mirrored")}
    learners = {name: learner_lib.Learner(variant, space, actor.head_sizes)
                for name, variant in variants.items()}
    actor.set_weights(learners["none"].get_weights(), 0)
    unroll = actor.collect()
    actor.close()
    for round_ in range(args.rounds):
        rates = {name: steps_per_second(learner, unroll, args.steps)
                 for name, learner in learners.items()}
        print(json.dumps({
            "round": round_, "devices": args.devices,
            "T": config.unroll_length, "B": config.num_envs,
            **{f"{name}_steps_per_s": round(rate, 1)
               for name, rate in rates.items()},
            "mirrored_over_none": round(rates["mirrored"] / rates["none"], 2),
        }), flush=True)


if __name__ == "__main__":
    main()
