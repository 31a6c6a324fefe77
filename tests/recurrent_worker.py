"""A program for tests/test_recurrent.py: the recurrent learner under
`tf.distribute.MirroredStrategy` over 2 logical CPUs equals the one-device
learner (logical devices must be configured at program start).

    python recurrent_worker.py OUT   (writes OUT/recurrent_mirrored.json)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf


def main(out_dir):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import distribute, envs
    from tf_vtrace.agent import learner as learner_lib
    from tf_vtrace.agent.config import Config
    config = Config(core="lstm", core_size=16, hidden_sizes=(32,), num_envs=4,
                    unroll_length=10, max_episode_steps=6, max_grad_norm=0.05,
                    total_env_steps=4000, jit_compile=False)
    space, action_space = envs.env_spaces(config.env_id)
    heads = envs.head_sizes(action_space)
    single = learner_lib.Learner(config, space, heads)
    mirrored = learner_lib.Learner(config.replace(strategy="mirrored"), space,
                                   heads)
    mirrored.model.set_weights(single.get_weights())
    actor = actor_lib.LocalActor(config)
    actor.set_weights(single.get_weights(), 0)
    unrolls = [actor.collect() for _ in range(3)]
    want = [single.step(u) for u in unrolls]
    got = [mirrored.step(u) for u in unrolls]
    weight_error = max(float(np.max(np.abs(a - b)))
                       for a, b in zip(single.get_weights(),
                                       mirrored.get_weights()))
    with open(os.path.join(out_dir, "recurrent_mirrored.json"), "w") as f:
        json.dump({"want": want, "got": got, "weight_error": weight_error,
                   "replicas": distribute.local_replicas(mirrored.strategy)},
                  f)
    print("DONE")


if __name__ == "__main__":
    main(sys.argv[1])
