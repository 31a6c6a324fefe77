"""Programs for tests/test_distributed_learner.py, one per subprocess.

Each one configures TensorFlow at its start (logical devices, collective ops
for MultiWorkerMirroredStrategy), which is why they run in fresh processes.

    python distributed_learner_worker.py mirrored OUT
    python distributed_learner_worker.py reference OUT   (writes OUT/unrolls.npz)
    python distributed_learner_worker.py worker OUT INDEX  (reads TF_CONFIG)
    python distributed_learner_worker.py train OUT   (the training loop, mirrored)
    python distributed_learner_worker.py late OUT    (multi_worker after a TF op)

Everything here is the real Learner on real CartPole unrolls of LocalActor.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

# B envs per replica or host, T steps, a clip norm the gradients exceed.
ENVS, LENGTH, CLIP_NORM, STEPS = 4, 10, 0.05, 2
TRAIN_UPDATES = 25


def config(num_envs, **changes):
    from tf_vtrace.agent.config import Config
    # total_env_steps fixes num_updates (the learning-rate schedule) at 100
    # whatever num_envs is, so that every run decays the same way.
    return Config(num_envs=num_envs, unroll_length=LENGTH,
                  total_env_steps=100 * LENGTH * num_envs,
                  max_grad_norm=CLIP_NORM, hidden_sizes=(32, 32), **changes)


def collect_unrolls(cfg, count):
    """`count` CartPole unrolls acted by the initial policy of `cfg.seed`."""
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    actor = actor_lib.LocalActor(cfg)
    space, _ = envs.env_spaces(cfg.env_id)
    actor.set_weights(learner_lib.Learner(cfg, space, actor.head_sizes)
                      .get_weights(), 0)
    unrolls = [actor.collect() for _ in range(count)]
    actor.close()
    return unrolls


def learner(cfg, strategy=None):
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    space, action_space = envs.env_spaces(cfg.env_id)
    return learner_lib.Learner(cfg, space, envs.head_sizes(action_space),
                               strategy=strategy)


def train(learner_, unrolls):
    """`STEPS` updates; the diagnostics of each and the final weights."""
    diagnostics = [learner_.step(unroll) for unroll in unrolls]
    return diagnostics, learner_.get_weights()


class PerReplicaClipping:
    """The control: what Keras 3 does when `apply_gradients` runs inside
    `strategy.run` with ``global_clipnorm``: each replica clips its own
    gradient to the norm, then the clipped gradients are summed and applied
    (by the learner's optimizer without clipping of its own)."""

    def __init__(self, learner_):
        import tensorflow as tf

        from tf_vtrace.agent import learner
        self.learner = learner_
        cfg = learner_.config
        with learner_.strategy.scope():
            self.optimizer = learner.make_optimizer(cfg)
            self.optimizer.build(learner_.model.trainable_variables)
        self._step = tf.function(self._clipped_step, autograph=False)

    def _clipped_step(self, *inputs):
        import tensorflow as tf
        learner_ = self.learner

        def replica(*replica_inputs):
            gradients = learner_._loss_and_gradients(*replica_inputs)[2]
            return tf.clip_by_global_norm(gradients, learner_.config.max_grad_norm)[0]
        gradients = learner_.strategy.reduce(
            tf.distribute.ReduceOp.SUM,
            learner_.strategy.run(replica, args=inputs), axis=None)
        self.optimizer.apply_gradients(
            zip(gradients, learner_.model.trainable_variables))

    def step(self, unroll):
        from tf_vtrace.agent import distribute, learner
        self._step(*distribute.distributed_inputs(
            self.learner.strategy, unroll, learner.LEARNER_INPUTS))


def max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def _two_logical_cpus():
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def train_loop(out):
    """`TRAIN_UPDATES` updates of the real training loop, mirrored."""
    _two_logical_cpus()
    from tf_vtrace.agent.train import train as train_
    cfg = config(2 * ENVS, strategy="mirrored").replace(
        total_env_steps=TRAIN_UPDATES * LENGTH * 2 * ENVS, checkpoint_every=10)
    train_(cfg, out, progress=False)


def late(out):
    """multi_worker built after TensorFlow started: the error says what to do."""
    import tensorflow as tf

    from tf_vtrace.agent import learner as learner_lib
    tf.constant(1.) + 1.
    try:
        learner_lib.make_strategy(config(ENVS, strategy="multi_worker"))
    except RuntimeError as error:
        with open(os.path.join(out, "late.txt"), "w") as handle:
            handle.write(str(error))


def mirrored(out):
    _two_logical_cpus()
    one_device = config(2 * ENVS)
    unrolls = collect_unrolls(one_device, STEPS)
    single = learner(one_device)
    initial = single.get_weights()
    two = learner(one_device.replace(strategy="mirrored"))
    # One strategy for both: two MirroredStrategy objects on the same devices
    # hand out the same collective instance keys, and their ops then clash.
    control = learner(one_device.replace(strategy="mirrored"), two.strategy)
    assert two.strategy.num_replicas_in_sync == 2
    start = max_difference(initial, two.get_weights())
    targets = [max_difference(single.vtrace_targets(unrolls[0]).values(),
                              two.vtrace_targets(unrolls[0]).values())]
    want, want_weights = train(single, unrolls)
    got, got_weights = train(two, unrolls)
    clipping = PerReplicaClipping(control)
    for unroll in unrolls:
        clipping.step(unroll)
    result = {
        "initial_difference": start, "targets_difference": targets[0],
        "one_device": want, "mirrored": got,
        "weight_difference": max_difference(want_weights, got_weights),
        "weight_change": max_difference(want_weights, initial),
        "per_replica_clipping_difference": max_difference(
            want_weights, control.get_weights()),
        "versions": [single.version, two.version,
                     int(clipping.optimizer.iterations.numpy())],
    }
    with open(os.path.join(out, "mirrored.json"), "w") as handle:
        json.dump(result, handle)


def reference(out):
    full = config(2 * ENVS)
    unrolls = collect_unrolls(full, STEPS)
    np.savez(os.path.join(out, "unrolls.npz"), **{
        f"{i}/{key}": value for i, unroll in enumerate(unrolls)
        for key, value in unroll.items()})
    diagnostics, weights = train(learner(full), unrolls)
    np.savez(os.path.join(out, "reference.npz"), *weights)
    with open(os.path.join(out, "reference.json"), "w") as handle:
        json.dump(diagnostics, handle)


def load_unrolls(path):
    data = np.load(path)
    unrolls = [{} for _ in range(STEPS)]
    for name in data.files:
        index, key = name.split("/")
        unrolls[int(index)][key] = data[name]
    return unrolls


def worker(out, index):
    from tf_vtrace.agent import learner as learner_lib
    cfg = config(ENVS, strategy="multi_worker")
    # First, before any TensorFlow op.
    strategy = learner_lib.make_strategy(cfg)
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    envs = slice(index * ENVS, (index + 1) * ENVS)
    unrolls = [dict({key: unroll[key][:, envs]
                     for key in learner_lib.LEARNER_INPUTS},
                    policy_version=unroll["policy_version"])
               for unroll in load_unrolls(os.path.join(out, "unrolls.npz"))]
    diagnostics, weights = train(learner(cfg, strategy), unrolls)
    np.savez(os.path.join(out, f"worker{index}.npz"), *weights)
    with open(os.path.join(out, f"worker{index}.json"), "w") as handle:
        json.dump(diagnostics, handle)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "worker":
        worker(out, int(sys.argv[3]))
    else:
        {"mirrored": mirrored, "reference": reference,
         "train": train_loop, "late": late}[mode](out)
    print("DONE", mode)
