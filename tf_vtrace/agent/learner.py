"""The learner: one compiled `tf.function` call per update, or per few.

The step runs the network over the T + 1 observations of B envs, computes the
IMPALA loss of ``config.correction`` (`tf_vtrace.agent.corrections`; V-trace
is `tf_vtrace.impala.impala_loss`) (time-limit truncations
bootstrap from the learner's own V of the episode's final observation), and
applies one optimizer update (linear learning-rate decay to 0, global-norm
gradient clipping), unless the loss or the gradient norm is non-finite: then
nothing changes (weights, the optimizer's moments, the step counter) and the
diagnostics say ``update_skipped = 1``.

One call can make up to ``config.updates_per_call`` updates in turn, on as
many unrolls (`Learner.update_each`): the same updates as one call each,
with one call's fixed cost for all (the loop gives it the unrolls already
queued when the learner takes one; `tf_vtrace.agent.config.Config`).

Distribution (``config.strategy``, `make_strategy`): under
`tf.distribute.MirroredStrategy` (devices of one host) or
`tf.distribute.MultiWorkerMirroredStrategy` (hosts) each replica gets an equal
slice of the B envs of its host's unroll (axis 1) and computes the gradient of
its share of the global loss: `impala_loss` with ``reduction="mean"`` in
replica context divides its local sum by the global T·B (the count summed over
replicas). The gradients are summed over replicas (the one-device gradient of
the concatenated unrolls), then clipped by their global norm and applied once,
in cross-replica context. Keras 3 optimizers called inside `strategy.run` with
``global_clipnorm`` would clip each replica's gradient before the sum, a
different update whenever clipping is active.

``config.correction`` picks the loss (`tf_vtrace.agent.corrections`):
V-trace, no correction (ρ = c = 1), 1-step importance sampling or the
ε-correction of the IMPALA paper's comparison. Whatever the correction, the
diagnostics report the real ρ = π/μ of the data (mean, clipped fraction,
effective sample size) and KL(μ ‖ π), to show how off-policy it was.
"""

import contextlib
import json
import os
import typing

import keras
import numpy as np
import tensorflow as tf

from tf_vtrace import _tape
from tf_vtrace.agent import _recurrent, corrections, networks

__all__ = ["Learner", "LEARNER_INPUTS", "Update", "make_optimizer",
           "make_strategy"]

# The unroll entries the learner step reads (see `tf_vtrace.agent.actor`).
LEARNER_INPUTS = ("observations", "actions", "behaviour_logits", "rewards",
                  "discounts", "truncated", "final_observations")
# What a recurrent network's replay reads besides (the resets need the
# terminations; the state is [B, ...], envs on axis 0).
RECURRENT_INPUTS = ("terminated", _recurrent.CORE_STATE_KEY)

# Diagnostics that are each replica's share of a global sum (the loss terms,
# divided by the global T·B); the others are means over the replica's slice,
# and equal slices make their mean over replicas the global mean.
_SUMMED_DIAGNOSTICS = ("policy_loss", "baseline_loss", "entropy_loss",
                       "kl_loss")


class Update(typing.NamedTuple):
    """What one learner update gives the loop.

    Attributes:
      diagnostics: `Learner.step`'s dict of Python floats.
      version: The learner version after the update (its updates so far).
      weights: The network's weights after the update, as
        `Learner.get_weights` returns them; None for an update that is not
        the last of its call (`Learner.update_each`).
    """
    diagnostics: dict
    version: int
    weights: list


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


def make_optimizer(config, global_clipnorm=None):
    """`config.optimizer` with its step size decayed linearly to 0 over the run.

    ``"rmsprop"`` is the IMPALA paper's (Espeholt et al. 2018, appendix: decay
    0.99, momentum 0, ε 0.01). Keras' `RMSprop`, as TF1's, adds ε inside the
    square root:

        v ← ρ v + (1 − ρ) g²,    θ ← θ − lr · g / √(v + ε),

    so a gradient far below √ε ≈ 0.1 moves θ by about 10·lr·g: small
    gradients give small steps. Adam (ε = 1e-5) divides by √v̂ + ε, which
    keeps each step near lr whatever the gradient's size.

    Args:
      config: The run's `Config` (`optimizer`, `learning_rate`, `num_updates`).
      global_clipnorm: Clip the gradient to this global norm first (None: no
        clip).
    """
    schedule = keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, config.num_updates, end_learning_rate=0.)
    if config.optimizer == "rmsprop":
        return keras.optimizers.RMSprop(
            schedule, rho=0.99, momentum=0., epsilon=0.01,
            global_clipnorm=global_clipnorm)
    return keras.optimizers.Adam(schedule, epsilon=1e-5,
                                 global_clipnorm=global_clipnorm)


def _slice_envs(unroll, keys, replica, replicas):
    """The `keys` of `unroll` for local replica `replica` of `replicas`: an
    equal slice of the envs (axis 1, time-major; axis 0 of the core state)."""
    envs = unroll["rewards"].shape[1] // replicas
    envs_slice = slice(replica * envs, (replica + 1) * envs)
    return [tf.convert_to_tensor(
        unroll[key][envs_slice] if key == _recurrent.CORE_STATE_KEY
        else unroll[key][:, envs_slice]) for key in keys]


def _int64_as_float32(value):
    """`value` (a scalar integer) as int64, bit-cast to two float32: exact
    in a float32 vector at any count (`np.ndarray.view(np.int64)` reads it)."""
    return tf.bitcast(tf.cast(value, tf.int64), tf.float32)


class _PreparedUnroll(dict):
    """An unroll with `tensors`: the step's inputs (`Learner.prepare`)."""

    tensors = None


def _time_batch_apply(model, observations):
    """The model on [T, B, ...] observations as one [T·B, ...] batch."""
    shape = tf.shape(observations)
    flat = tf.reshape(observations, tf.concat([[-1], shape[2:]], 0))
    logits, values = model(flat, training=True)
    return (tf.reshape(logits, tf.concat([shape[:2], [-1]], 0)),
            tf.reshape(values, shape[:2]))


class Learner:
    """Owns the network and the optimizer; `step(unroll)` is one update.

    Under a strategy (see the module doc), `step` takes this host's unroll;
    the update is the one-device update on the unrolls of all hosts
    concatenated along the envs axis, in host order.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      observation_space: The env's observation space.
      head_sizes: Actions per head.
      strategy: A `tf.distribute.Strategy` for the network, optimizer and
        step; None: `make_strategy(config)` (no strategy for "none").

    Raises:
      ValueError: ``config.num_envs`` not divisible by the strategy's
        devices on this host.
    """

    def __init__(self, config, observation_space, head_sizes, strategy=None):
        self.config = config
        self.head_sizes = tuple(head_sizes)
        self.strategy = strategy if strategy is not None else make_strategy(config)
        self._local_replicas = (
            1 if self.strategy is None
            else len(self.strategy.extended.worker_devices))
        if config.num_envs % self._local_replicas:
            raise ValueError(
                f"Config.num_envs must be divisible by the {self._local_replicas}"
                f" devices of the strategy on this host, got {config.num_envs}.")
        scope = (self.strategy.scope() if self.strategy is not None
                 else contextlib.nullcontext())
        with scope:
            self.model = networks.build_network(
                observation_space, self.head_sizes, config.hidden_sizes,
                seed=config.seed, core=config.core, core_size=config.core_size,
                separate_value_core=config.separate_value_core)
            self.optimizer = make_optimizer(config, config.max_grad_norm)
            self.optimizer.build(self.model.trainable_variables)
        self.recurrent = _recurrent.is_recurrent(self.model)
        self._input_keys = LEARNER_INPUTS + (
            RECURRENT_INPUTS if self.recurrent else ())
        # No AutoGraph: the step has no Python control flow on tensors, and
        # converting the library's code took most of the first call's time.
        # XLA cannot compile a step that spans devices; under a strategy the
        # loss still runs as its own compiled call on each replica.
        if self.strategy is None:
            self._compiled_updates = tf.function(
                self._updates_packed, autograph=False,
                jit_compile=config.jit_compile)
            self._step = tf.function(self._train_step, autograph=False)
        else:
            self._step = tf.function(self._distributed_train_step,
                                     autograph=False)
        self._targets = tf.function(self._vtrace_targets, autograph=False)
        # The step's concrete function per input signature (shapes, dtypes):
        # called flat, it skips tf.function's argument matching, a third of
        # the learner thread's time (it holds the GIL the actors share).
        self._concrete_steps = {}
        # Where each weight lies in the concatenated vector, and its shape.
        shapes = [tuple(v.shape) for v in self.model.weights]
        ends = np.cumsum([int(np.prod(shape)) for shape in shapes]).tolist()
        self._weight_slices = list(zip([0] + ends[:-1], ends, shapes))
        # Compiled, the reads and their concatenation are one XLA call
        # (≈60 µs) instead of two dozen TensorFlow ops (≈200 µs).
        self._flat_weights, self._version_and_weights = (
            (tf.function(self._concatenated_weights, autograph=False,
                         jit_compile=True).get_concrete_function(),
             tf.function(self._version_then_weights, autograph=False,
                         jit_compile=True))
            if self.strategy is None else (None, None))
        self._diagnostic_keys = None  # Set when the step is traced.
        # The step's count input, one constant per count it may take.
        self._counts = [tf.constant(count) for count in
                        range(self.updates_per_call + 1)]

    @property
    def updates_per_call(self):
        """The most updates one call makes (`update_each`): 1 under a
        strategy, else `Config.updates_per_call`."""
        return 1 if self.strategy is not None else self.config.updates_per_call

    @property
    def version(self):
        """Learner updates so far."""
        return int(self.optimizer.iterations.numpy())

    def get_weights(self):
        """The network's weights as a list of numpy arrays (`keras.Model.
        get_weights()`): one compiled read and one copy to the host, then
        views of it; the loop pushes them after every update."""
        if self._flat_weights is None:
            return self.model.get_weights()
        return self._split_weights(
            _tape.call_concrete_unrecorded(self._flat_weights, []).numpy())

    def _split_weights(self, flat):
        """The flat weights vector as `get_weights`' list (views of it)."""
        return [flat[start:end].reshape(shape)
                for start, end, shape in self._weight_slices]

    def _concatenated_weights(self):
        return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1])
                          for v in self.model.weights], 0)

    def _network_outputs(self, batch):
        """Logits [T + 1, B, ΣA], values [T + 1, B] and the truncation
        values [T, B]: V(x_{t+1}) of each truncated episode's own final
        observation, from the learner's value like every other value in the
        targets (a recurrent network replays the unroll, see `_recurrent`)."""
        truncated = batch["truncated"]
        if self.recurrent:
            return _recurrent.unroll(
                self.model, batch["observations"],
                tf.logical_or(batch["terminated"], truncated),
                batch[_recurrent.CORE_STATE_KEY], batch["final_observations"],
                truncated)
        logits, values = _time_batch_apply(self.model, batch["observations"])
        truncation_values = tf.cond(
            tf.reduce_any(truncated),
            lambda: tf.stop_gradient(_time_batch_apply(
                self.model, batch["final_observations"])[1]),
            lambda: tf.zeros_like(batch["rewards"]))
        return logits, values, truncation_values

    def _loss_inputs(self, *inputs):
        """The `corrections.LossInputs` of one unroll (`self._input_keys`)."""
        batch = dict(zip(self._input_keys, inputs))
        actions, behaviour_logits, rewards, discounts, truncated = (
            batch[key] for key in ("actions", "behaviour_logits", "rewards",
                                   "discounts", "truncated"))
        logits, values, truncation_values = self._network_outputs(batch)
        T = tf.shape(rewards)[0]
        target_heads = networks.split_heads(logits[:T], self.head_sizes)
        behaviour_heads = networks.split_heads(behaviour_logits, self.head_sizes)
        action_heads = tf.unstack(actions, len(self.head_sizes), axis=-1)
        return corrections.LossInputs(
            behaviour_heads, target_heads, action_heads, discounts, rewards,
            values[:T], values[T], truncated, truncation_values)

    def _loss_and_gradients(self, *inputs):
        """`(loss, diagnostics, gradients)` of one unroll, nothing applied."""
        with tf.GradientTape() as tape:
            inputs = self._loss_inputs(*inputs)
            loss, diagnostics = corrections.correction_loss(
                self.config.correction, inputs,
                dict(baseline_cost=self.config.baseline_cost,
                     entropy_cost=self.config.entropy_cost),
                lambda_=self.config.vtrace_lambda)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        return loss, diagnostics, gradients

    def _apply(self, loss, diagnostics, gradients):
        """One optimizer update unless the loss or ‖g‖ is non-finite; the
        diagnostics with the loss, ‖g‖ and ``update_skipped`` (1: skipped).

        The test is a `tf.cond` inside the compiled step: a skipped update
        leaves the weights, the optimizer's moments and its step counter (the
        learner version) as they were, at the cost of two reductions."""
        gradient_norm = tf.linalg.global_norm(gradients)
        finite = tf.logical_and(tf.math.is_finite(loss),
                                tf.math.is_finite(gradient_norm))

        def update():
            self.optimizer.apply_gradients(
                zip(gradients, self.model.trainable_variables))
            return tf.constant(0.)

        skipped = tf.cond(finite, update, lambda: tf.constant(1.))
        return dict(diagnostics, loss=loss, gradient_norm=gradient_norm,
                    update_skipped=skipped)

    def _update_packed(self, *inputs):
        """The packed diagnostics of one update, then the learner version
        before it (`_int64_as_float32`: read before the update assigns)."""
        before = _int64_as_float32(self.optimizer.iterations)
        diagnostics = self._apply(*self._loss_and_gradients(*inputs))
        return tf.concat([self._packed(diagnostics), before], 0)

    def _updates_packed(self, count, *inputs):
        """`_update_packed` of up to `Config.updates_per_call` updates in
        turn, concatenated: the i-th on the i-th unroll's inputs, made
        while i < `count` (zeros after). Each reads the weights the one
        before assigned (the graph's automatic control dependencies order
        them, in the compiled program too)."""
        width = len(self._input_keys)
        blocks = [self._update_packed(*inputs[:width])]
        for i in range(1, self.updates_per_call):
            unroll_inputs = inputs[i * width:(i + 1) * width]
            blocks.append(tf.cond(
                i < count,
                lambda unroll_inputs=unroll_inputs: self._update_packed(
                    *unroll_inputs),
                lambda: tf.zeros_like(blocks[0])))
        return tf.concat(blocks, 0)

    def _version_then_weights(self):
        return tf.concat([_int64_as_float32(self.optimizer.iterations),
                          self._concatenated_weights()], 0)

    def _train_step(self, count, *inputs):
        """All the loop needs from `count` updates (`_updates_packed`), as
        one float32 vector: the packed diagnostics and the learner version
        before each update, the version after the last (int64, bit-cast to
        two float32 each: exact at any count) and the weights after it
        (flat). One vector is one copy to the host; each call or copy costs
        the learner thread a wait for the interpreter lock the actor
        threads hold (`_step_outputs` splits it).

        The weights are read by a second XLA call, ordered after the update
        by the graph's automatic control dependencies: as outputs of the
        update's XLA program, they came back one update old in one run of
        the test suite under load."""
        return tf.concat([self._compiled_updates(count, *inputs),
                          self._version_and_weights()], 0)

    def _packed(self, diagnostics):
        """The diagnostics as one float32 vector (one copy to the host per
        update instead of one per scalar); their names are kept at trace
        time for `step`."""
        self._diagnostic_keys = tuple(diagnostics)
        return tf.stack([tf.cast(value, tf.float32)
                         for value in diagnostics.values()])

    def _replica_loss_and_gradients(self, *inputs):
        """`_loss_and_gradients` of this replica, all-reduced over replicas:
        the summed gradients and global loss, the means of the statistics."""
        loss, diagnostics, gradients = self._loss_and_gradients(*inputs)
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

    def _distributed_train_step(self, *inputs):
        """`_train_step` on per-replica inputs: replica gradients of the
        global loss's shares, summed, then clipped and applied once."""
        reduced = self.strategy.run(self._replica_loss_and_gradients,
                                    args=inputs)
        # Every replica holds the same sums; the update reads one copy.
        loss, diagnostics, gradients = tf.nest.map_structure(
            lambda value: self.strategy.experimental_local_results(value)[0],
            reduced)
        return self._packed(self._apply(loss, diagnostics, gradients))

    def _vtrace_targets(self, *inputs):
        inputs = self._loss_inputs(*inputs)
        vs, advantages, rhos = corrections.correction_targets(
            self.config.correction, inputs, self.config.vtrace_lambda)
        return {"vs": vs, "pg_advantages": advantages, "rhos": rhos,
                "values": inputs.values,
                "bootstrap_value": inputs.bootstrap_value,
                "truncation_values": inputs.truncation_values}

    def _inputs(self, unroll):
        """The step's inputs from `unroll`, as tensors (all its envs)."""
        return [tf.convert_to_tensor(unroll[key]) for key in self._input_keys]

    def _distributed_inputs(self, unroll):
        """Per-replica inputs: each local replica's slice of the envs.
        (`experimental_distribute_values_from_function`, not a dataset: the
        learner is pushed one numpy unroll at a time, split on axis 1.)"""
        local = self._local_replicas
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: _slice_envs(
                unroll, self._input_keys,
                context.replica_id_in_sync_group % local, local))

    def _diagnostics(self, packed, version_before, unroll):
        """`step`'s dict: the packed diagnostics and the policy lag."""
        lag = version_before - int(unroll["policy_version"])
        return dict(zip(self._diagnostic_keys, packed.tolist()),
                    policy_lag=float(lag))

    def update(self, unroll):
        """One update on `unroll` (an actor's dict): an `Update` with
        `step`'s diagnostics and the version and weights after it."""
        return self.update_each([unroll])[0]

    def update_each(self, unrolls):
        """An update on each of `unrolls` in turn, in one compiled call (at
        most `Config.updates_per_call` of them; one under a strategy): a
        list of `Update`s, in order. Each update reads the weights the one
        before left, as separate calls would; the weights are read back
        after the last only (the others' `weights` are None)."""
        if not 1 <= len(unrolls) <= self.updates_per_call:
            raise ValueError(
                f"update_each takes 1 to {self.updates_per_call} unrolls "
                f"(Config.updates_per_call; 1 under a strategy), got "
                f"{len(unrolls)}.")
        if self.strategy is not None:
            diagnostics = self.step(unrolls[0])
            return [Update(diagnostics, self.version, self.get_weights())]
        blocks, after, flat = self._step_outputs(unrolls)
        versions_after = [before for _, before in blocks[1:]] + [after]
        updates = [Update(self._diagnostics(packed, before, unroll), version,
                          None)
                   for (packed, before), version, unroll
                   in zip(blocks, versions_after, unrolls)]
        updates[-1] = updates[-1]._replace(weights=self._split_weights(flat))
        return updates

    def prepare(self, unroll):
        """`unroll` with the step's input tensors made from it, for an actor
        thread to call before it queues the unroll while the learner is the
        slower side: the learner then skips their conversion (issue 19,
        `tf_vtrace.agent.backends.ThreadActors`, docs/scaling.md). A dict
        equal to `unroll`; unchanged under a strategy, whose inputs are per
        replica."""
        if self.strategy is not None:
            return unroll
        prepared = _PreparedUnroll(unroll)
        prepared.tensors = self._inputs(unroll)
        return prepared

    def _step_outputs(self, unrolls):
        """`_train_step` on `unrolls`, called flat, split on the host:
        `(blocks, version after, flat weights)`, with one block
        `(packed diagnostics, version before)` per unroll (numpy views of
        the call's one output)."""
        # The signature from the numpy arrays: an EagerTensor's `shape`
        # releases the interpreter lock, and under load each took ≈40 µs to
        # get it back from an actor thread (docs/scaling.md).
        signature = tuple((array.shape, array.dtype) for array in
                          (np.asarray(unrolls[0][key])
                           for key in self._input_keys))
        tensors = [getattr(unroll, "tensors", None) or self._inputs(unroll)
                   for unroll in unrolls]
        # The step takes `updates_per_call` unrolls; the slots past the
        # count repeat the first (unread).
        spare = self.updates_per_call - len(unrolls)
        inputs = [self._counts[len(unrolls)]] + [
            tensor for unroll_tensors in tensors + [tensors[0]] * spare
            for tensor in unroll_tensors]
        concrete = self._concrete_steps.get(signature)
        if concrete is None:
            concrete = self._step.get_concrete_function(*inputs)
            self._concrete_steps[signature] = concrete
        out = _tape.call_concrete_unrecorded(concrete, inputs).numpy()
        count = len(self._diagnostic_keys)
        width = count + 2  # The diagnostics, then the version before.
        blocks = [(out[start:start + count],
                   out[start + count:start + width].view(np.int64).item())
                  for start in range(0, width * len(unrolls), width)]
        rest = out[width * self.updates_per_call:]
        return blocks, rest[:2].view(np.int64).item(), rest[2:]

    def step(self, unroll):
        """One update on `unroll` (an actor's dict); returns the diagnostics
        as Python floats, plus ``policy_lag`` (learner version − the
        unroll's policy version, before this update)."""
        if self.strategy is None:
            blocks, _, _ = self._step_outputs([unroll])
            packed, before = blocks[0]
            return self._diagnostics(packed, before, unroll)
        version_before = self.version
        packed = self._step(*self._distributed_inputs(unroll)).numpy()
        return self._diagnostics(packed, version_before, unroll)

    def vtrace_targets(self, unroll):
        """What the loss is built on, without updating: a dict of numpy
        ``vs``, ``pg_advantages``, ``rhos`` (ρ_t = π/μ of the data, see
        `corrections.correction_targets`), ``values``, ``bootstrap_value`` and
        ``truncation_values`` for `unroll` under the current weights."""
        return {k: np.asarray(v) for k, v in
                self._targets(*self._inputs(unroll)).items()}
