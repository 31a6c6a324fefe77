"""The learner under `tf.distribute`: the strategy, its inputs, its all-reduce.

Under `tf.distribute.MirroredStrategy` (devices of one host) or
`tf.distribute.MultiWorkerMirroredStrategy` (hosts) each replica gets an equal
slice of the B envs of its host's unroll (axis 1; `distributed_inputs`) and
computes the gradient of its share of the global loss: `impala_loss` with
``reduction="mean"`` in replica context divides its local sum by the global
T·B (the count summed over replicas). `all_reduced` sums the gradients over
replicas (the one-device gradient of the concatenated unrolls); the learner
then clips them by their global norm and applies them once, in cross-replica
context. Keras 3 optimizers called inside `strategy.run` with
``global_clipnorm`` would clip each replica's gradient before the sum, a
different update whenever clipping is active.
"""

import contextlib
import json
import os

import tensorflow as tf

from tf_vtrace.agent import _recurrent

__all__ = ["all_reduced", "check_tf_config", "distributed_inputs",
           "local_replicas", "make_strategy", "replica_results", "scope"]

# Diagnostics that are each replica's share of a global sum (the loss terms,
# divided by the global T·B); the others are means over the replica's slice,
# and equal slices make their mean over replicas the global mean.
_SUMMED_DIAGNOSTICS = ("policy_loss", "baseline_loss", "entropy_loss",
                       "kl_loss")


def make_strategy(config):
    """The `tf.distribute` strategy of ``config.strategy`` (None for "none").

    ``"mirrored"`` mirrors over this host's GPUs, or without GPUs over its
    logical CPU devices (one unless configured with
    `tf.config.set_logical_device_configuration`). ``"multi_worker"`` reads
    the cluster from ``TF_CONFIG`` and must be built before any TensorFlow op
    runs in the process (collective ops are configured at program start);
    `tf_vtrace.agent.train.train` builds it first.

    Args:
      config: A `tf_vtrace.agent.config.Config`.

    Returns:
      A `tf.distribute.Strategy`, or None for ``"none"``.

    Raises:
      RuntimeError: ``"multi_worker"`` after TensorFlow has started.
      ValueError: ``"multi_worker"`` with a ``TF_CONFIG`` that does not
        describe this worker (`check_tf_config`).

    Examples:
      >>> from tf_vtrace.agent.config import Config
      >>> make_strategy(Config()) is None
      True
    """
    if config.strategy == "none":
        return None
    if config.strategy == "mirrored":
        devices = (tf.config.list_logical_devices("GPU")
                   or tf.config.list_logical_devices("CPU"))
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    check_tf_config()
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as error:
        raise RuntimeError(
            "Config.strategy='multi_worker' must be built before any "
            "TensorFlow op runs in the process: call make_strategy(config) "
            "(or train) first.") from error


def check_tf_config(environ=os.environ):
    """Raises a ValueError naming what is wrong unless ``TF_CONFIG`` is
    unset or ``{}`` (one worker), or a JSON object whose ``task`` is a
    worker of its ``cluster``: {"cluster": {JOB: [ADDRESS, ...]}, "task":
    {"type": JOB, "index": I}}. TensorFlow would fail on each later, with a
    traceback."""
    text = environ.get("TF_CONFIG")
    if text is None:
        return
    try:
        tf_config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not JSON ({error}): {text!r}.") from None
    if tf_config == {}:  # As unset: one worker.
        return
    cluster = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    task = tf_config.get("task") if isinstance(tf_config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ValueError(
            'TF_CONFIG must be {"cluster": {JOB: [ADDRESS, ...]}, "task": {"type": '
            f'JOB, "index": I}}}}; got {text!r}.')
    addresses = cluster.get(task.get("type"))
    index = task.get("index")
    if (not isinstance(addresses, list) or isinstance(index, bool)
            or not isinstance(index, int) or not 0 <= index < len(addresses)):
        raise ValueError(
            f"TF_CONFIG's task {task!r} is not one of its cluster's workers: "
            "its type must be a job of the cluster "
            f"({sorted(cluster)}) and its index one of that job's addresses.")


def local_replicas(strategy, num_envs=None):
    """The replicas of `strategy` on this host (1 for None).

    Raises:
      ValueError: `num_envs` (``Config.num_envs``) given and not divisible
        by them.
    """
    replicas = 1 if strategy is None else len(strategy.extended.worker_devices)
    if num_envs is not None and num_envs % replicas:
        raise ValueError(
            f"Config.num_envs must be divisible by the {replicas}"
            f" devices of the strategy on this host, got {num_envs}.")
    return replicas


def scope(strategy):
    """`strategy.scope()`, or a context that does nothing for None."""
    return (strategy.scope() if strategy is not None
            else contextlib.nullcontext())


def _slice_envs(unroll, keys, replica, replicas):
    """The `keys` of `unroll` for local replica `replica` of `replicas`: an
    equal slice of the envs (axis 1, time-major; axis 0 of the core state)."""
    envs = unroll["rewards"].shape[1] // replicas
    envs_slice = slice(replica * envs, (replica + 1) * envs)
    return [tf.convert_to_tensor(
        unroll[key][envs_slice] if key == _recurrent.CORE_STATE_KEY
        else unroll[key][:, envs_slice]) for key in keys]


def distributed_inputs(strategy, unroll, keys):
    """The `keys` of `unroll` (an actor's dict) as per-replica inputs: each
    local replica's slice of the envs.
    (`experimental_distribute_values_from_function`, not a dataset: the
    learner is pushed one numpy unroll at a time, split on axis 1.)"""
    local = local_replicas(strategy)
    return strategy.experimental_distribute_values_from_function(
        lambda context: _slice_envs(
            unroll, keys, context.replica_id_in_sync_group % local, local))


def all_reduced(loss, diagnostics, gradients):
    """One replica's `(loss, diagnostics, gradients)`, all-reduced over the
    replicas (in replica context): the summed gradients and global loss
    terms, the means of the statistics."""
    context = tf.distribute.get_replica_context()
    summed = {key: value for key, value in diagnostics.items()
              if key in _SUMMED_DIAGNOSTICS}
    means = {key: value for key, value in diagnostics.items()
             if key not in _SUMMED_DIAGNOSTICS}
    # One batched all-reduce per kind (MultiWorkerMirroredStrategy's
    # cross-replica `reduce` does not take a list of shapes).
    loss, summed, gradients = context.all_reduce(
        tf.distribute.ReduceOp.SUM, (loss, summed, gradients))
    means = context.all_reduce(tf.distribute.ReduceOp.MEAN, means)
    return loss, dict(summed, **means), gradients


def replica_results(strategy, loss_and_gradients, inputs):
    """`loss_and_gradients(*inputs)` on each replica, `all_reduced`, as one
    copy in cross-replica context (every replica holds the same sums)."""
    reduced = strategy.run(
        lambda *replica_inputs: all_reduced(
            *loss_and_gradients(*replica_inputs)),
        args=inputs)
    return tf.nest.map_structure(
        lambda value: strategy.experimental_local_results(value)[0], reduced)
