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

Distribution (``config.strategy``, `make_strategy`): each replica computes
the gradient of its share of the global loss on its slice of the envs; the
gradients are summed over replicas, then clipped by their global norm and
applied once (`tf_vtrace.agent.distribute`). The step's inputs and its one
output vector on the host are `tf_vtrace.agent._step_io`'s.

``config.correction`` picks the loss (`tf_vtrace.agent.corrections`):
V-trace, no correction (ρ = c = 1), 1-step importance sampling or the
ε-correction of the IMPALA paper's comparison. Whatever the correction, the
diagnostics report the real ρ = π/μ of the data (mean, clipped fraction,
effective sample size) and KL(μ ‖ π), to show how off-policy it was.
"""

import typing

import keras
import numpy as np
import tensorflow as tf

from tf_vtrace import _dispatch
from tf_vtrace.agent import (
    _recurrent,
    _running_statistics,
    _step_io,
    corrections,
    distribute,
    networks,
    policies,
)
from tf_vtrace.agent.distribute import check_tf_config, make_strategy

__all__ = ["Learner", "LEARNER_INPUTS", "Update", "check_tf_config",
           "make_optimizer", "make_strategy"]

# The unroll entries the learner step reads (see `tf_vtrace.agent.actor`).
LEARNER_INPUTS = ("observations", "actions", "behaviour_logits", "rewards",
                  "discounts", "truncated", "final_observations")
# What a recurrent network's replay reads besides (the resets need the
# terminations; the state is [B, ...], envs on axis 0).
RECURRENT_INPUTS = ("terminated", _recurrent.CORE_STATE_KEY)


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


def _time_batch_apply(model, observations):
    """The model on [T, B, ...] observations as one [T·B, ...] batch."""
    shape = tf.shape(observations)
    flat = tf.reshape(observations, tf.concat([[-1], shape[2:]], 0))
    logits, values = model(flat, training=True)
    return (tf.reshape(logits, tf.concat([shape[:2], [-1]], 0)),
            tf.reshape(values, shape[:2]))


def _apply_if_finite(optimizer, variables, loss, diagnostics, gradients):
    """One `optimizer` update of `variables` unless the loss or ‖g‖ is
    non-finite; the diagnostics with the loss, ‖g‖ and ``update_skipped``
    (1: skipped).

    The test is a `tf.cond` inside the compiled step: a skipped update
    leaves the weights, the optimizer's moments and its step counter (the
    learner version) as they were, at the cost of two reductions."""
    gradient_norm = tf.linalg.global_norm(gradients)
    finite = tf.logical_and(tf.math.is_finite(loss),
                            tf.math.is_finite(gradient_norm))

    def update():
        optimizer.apply_gradients(zip(gradients, variables))
        return tf.constant(0.)

    skipped = tf.cond(finite, update, lambda: tf.constant(1.))
    return dict(diagnostics, loss=loss, gradient_norm=gradient_norm,
                update_skipped=skipped)


def _network_outputs(model, batch, recurrent):
    """Logits [T + 1, B, ΣA], values [T + 1, B] and the truncation values
    [T, B] of `model` on `batch` (an unroll's tensors): V(x_{t+1}) of each
    truncated episode's own final observation, from the learner's value like
    every other value in the targets (a `recurrent` network replays the
    unroll, see `_recurrent`)."""
    truncated = batch["truncated"]
    if recurrent:
        return _recurrent.unroll(
            model, batch["observations"],
            tf.logical_or(batch["terminated"], truncated),
            batch[_recurrent.CORE_STATE_KEY], batch["final_observations"],
            truncated)
    logits, values = _time_batch_apply(model, batch["observations"])
    truncation_values = tf.cond(
        tf.reduce_any(truncated),
        lambda: tf.stop_gradient(_time_batch_apply(
            model, batch["final_observations"])[1]),
        lambda: tf.zeros_like(batch["rewards"]))
    return logits, values, truncation_values


class Learner:
    """Owns the network and the optimizer; `update_each(unrolls)` is the
    loop's door: one compiled call for a few updates.

    Under a strategy (see the module doc), it takes this host's unrolls;
    the update is the one-device update on the unrolls of all hosts
    concatenated along the envs axis, in host order.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      observation_space: The env's observation space.
      head_sizes: Actions per head, or the action space's
        `tf_vtrace.agent.policies.ActionPolicy` (the actors' own).
      strategy: A `tf.distribute.Strategy` for the network, optimizer and
        step; None: `make_strategy(config)` (no strategy for "none").

    With `Config.normalize_observations` or `Config.scale_rewards` the
    learner owns the running statistics (`_running_statistics`, weights of
    the network): it merges each unroll's raw observations and discounted
    returns into them before the update, which then sees them like the
    weights, and ships them to the actors with the weights.

    Raises:
      ValueError: ``config.num_envs`` not divisible by the strategy's
        devices on this host.
    """

    def __init__(self, config, observation_space, head_sizes, strategy=None):
        self.config = config
        self.action_policy = policies.as_policy(head_sizes)
        self.head_sizes = getattr(self.action_policy, "head_sizes", None)
        self.strategy = strategy if strategy is not None else make_strategy(config)
        distribute.local_replicas(self.strategy, config.num_envs)
        with distribute.scope(self.strategy):
            self.model = networks.for_config(config, observation_space,
                                             self.action_policy, seed=config.seed)
            self.optimizer = make_optimizer(config, config.max_grad_norm)
            self.optimizer.build(self.model.trainable_variables)
        self.recurrent = _recurrent.is_recurrent(self.model)
        self._input_keys = LEARNER_INPUTS + (
            RECURRENT_INPUTS if self.recurrent else ())
        self._vector = _step_io.StepVector(self.model.weights)
        # No AutoGraph: the step has no Python control flow on tensors, and
        # converting the library's code took most of the first call's time.
        # XLA cannot compile a step that spans devices; under a strategy the
        # loss still runs as its own compiled call on each replica.
        if self.strategy is None:
            self._compile_step()
        else:
            self._step = tf.function(self._distributed_train_step,
                                     autograph=False)
            self._flat_weights = None
        self._targets = tf.function(self._vtrace_targets, autograph=False)
        self.statistics = _running_statistics.find(self.model)
        self._merge = (None if self.statistics is None else tf.function(
            self.statistics.update, autograph=False))

    def _compile_step(self):
        """The one-device step and its weight reads, compiled."""
        config = self.config
        self._compiled_updates = tf.function(
            self._updates_packed, autograph=False,
            jit_compile=config.jit_compile)
        self._step = tf.function(self._train_step, autograph=False)
        # The step's concrete function per input signature (shapes, dtypes):
        # called flat, it skips tf.function's argument matching, a third of
        # the learner thread's time (it holds the GIL the actors share).
        self._concrete_steps = {}
        # Compiled, the reads and their concatenation are one XLA call
        # (≈60 µs) instead of two dozen TensorFlow ops (≈200 µs).
        self._flat_weights = tf.function(
            lambda: _step_io.flat_weights(self.model.weights),
            autograph=False, jit_compile=True).get_concrete_function()
        self._version_and_weights = tf.function(
            lambda: self._vector.version_then_weights(
                self.optimizer.iterations, self.model.weights),
            autograph=False, jit_compile=True)
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
        return self._vector.split_weights(
            _dispatch.call_concrete_unrecorded(self._flat_weights, []).numpy())

    def _loss_inputs(self, *inputs):
        """The `corrections.CorrectionInputs` of one unroll
        (`self._input_keys`)."""
        batch = dict(zip(self._input_keys, inputs))
        actions, behaviour_logits, rewards, discounts, truncated = (
            batch[key] for key in ("actions", "behaviour_logits", "rewards",
                                   "discounts", "truncated"))
        logits, values, truncation_values = _network_outputs(
            self.model, batch, self.recurrent)
        if self.config.scale_rewards:
            rewards = tf.cast(self.statistics.scale_rewards(rewards), rewards.dtype)
        T = tf.shape(rewards)[0]
        target_heads, action_heads, dist_class = self.action_policy.loss_heads(
            logits[:T], actions)
        behaviour_heads, _, _ = self.action_policy.loss_heads(behaviour_logits,
                                                              None)
        return corrections.CorrectionInputs(
            behaviour_heads, target_heads, action_heads, discounts, rewards,
            values[:T], values[T], truncated, truncation_values, dist_class)

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

    def _update_packed(self, *inputs):
        """The packed diagnostics of one update, then the learner version
        before it (`_step_io.int64_as_float32`: read before the update assigns)."""
        before = _step_io.int64_as_float32(self.optimizer.iterations)
        diagnostics = _apply_if_finite(
            self.optimizer, self.model.trainable_variables,
            *self._loss_and_gradients(*inputs))
        return tf.concat([self._vector.pack(diagnostics), before], 0)

    def _updates_packed(self, count, *inputs):
        """`_update_packed` of up to `Config.updates_per_call` updates in
        turn (`_step_io.in_turn`)."""
        return _step_io.in_turn(self._update_packed, count, inputs,
                                len(self._input_keys), self.updates_per_call)

    def _train_step(self, count, *inputs):
        """All the loop needs from `count` updates (`_updates_packed`), as
        one float32 vector (`_step_io`'s layout; `_step_outputs` splits it).

        The weights are read by a second XLA call, ordered after the update
        by the graph's automatic control dependencies: as outputs of the
        update's XLA program, they came back one update old in one run of
        the test suite under load."""
        return tf.concat([self._compiled_updates(count, *inputs),
                          self._version_and_weights()], 0)

    def _distributed_train_step(self, *inputs):
        """`_train_step` on per-replica inputs: replica gradients of the
        global loss's shares, summed, then clipped and applied once."""
        loss, diagnostics, gradients = distribute.replica_results(
            self.strategy, self._loss_and_gradients, inputs)
        return self._vector.pack(_apply_if_finite(
            self.optimizer, self.model.trainable_variables, loss, diagnostics,
            gradients))

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

    def update(self, unroll):
        """One update on `unroll` (an actor's dict): an `Update` with
        `step`'s diagnostics and the version and weights after it. A
        convenience for tests and benchmarks (`update_each([unroll])[0]`)."""
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
        updates = [Update(self._vector.diagnostics(
                              packed, before, unroll["policy_version"]),
                          version, None)
                   for (packed, before), version, unroll
                   in zip(blocks, versions_after, unrolls)]
        updates[-1] = updates[-1]._replace(
            weights=self._vector.split_weights(flat))
        return updates

    def prepare(self, unroll):
        """`unroll` with the step's input tensors made from it, for an actor
        thread to call before it queues the unroll while the learner is the
        slower side: the learner then skips their conversion
        (`tf_vtrace.agent.backends.ThreadActors`, docs/records/scaling.md). A dict
        equal to `unroll`; unchanged under a strategy, whose inputs are per
        replica."""
        if self.strategy is not None:
            return unroll
        prepared = _step_io.PreparedUnroll(unroll)
        prepared.tensors = self._inputs(unroll)
        return prepared

    def merge_statistics(self, unroll):
        """Merges `unroll`'s raw observations x_0 … x_{T−1} (with
        `Config.normalize_observations`) and discounted returns (with
        `Config.scale_rewards`) into the running statistics; nothing
        without them."""
        if self._merge is None:
            return
        config = self.config
        self._merge(
            unroll["observations"][:-1] if config.normalize_observations else None,
            unroll[_running_statistics.RETURNS_KEY] if config.scale_rewards else None)

    def _step_outputs(self, unrolls):
        """`_train_step` on `unrolls`, called flat, split on the host
        (`_step_io.StepVector.split`)."""
        for unroll in unrolls:
            self.merge_statistics(unroll)
        tensors = [getattr(unroll, "tensors", None) or self._inputs(unroll)
                   for unroll in unrolls]
        inputs = _step_io.step_inputs(self._counts[len(unrolls)], tensors,
                                      self.updates_per_call)
        signature = _step_io.signature(unrolls[0], self._input_keys)
        concrete = self._concrete_steps.get(signature)
        if concrete is None:
            concrete = self._step.get_concrete_function(*inputs)
            self._concrete_steps[signature] = concrete
        out = _dispatch.call_concrete_unrecorded(concrete, inputs).numpy()
        return self._vector.split(out, len(unrolls), self.updates_per_call)

    def step(self, unroll):
        """One update on `unroll` (an actor's dict); returns the diagnostics
        as Python floats, plus ``policy_lag`` (learner version − the
        unroll's policy version, before this update). A convenience for
        tests and benchmarks; the loop calls `update_each`."""
        if self.strategy is None:
            blocks, _, _ = self._step_outputs([unroll])
            packed, before = blocks[0]
        else:
            before = self.version
            self.merge_statistics(unroll)
            packed = self._step(*distribute.distributed_inputs(
                self.strategy, unroll, self._input_keys)).numpy()
        return self._vector.diagnostics(packed, before,
                                        unroll["policy_version"])

    def vtrace_targets(self, unroll):
        """What the loss is built on, without updating: a dict of numpy
        ``vs``, ``pg_advantages``, ``rhos`` (ρ_t = π/μ of the data, see
        `corrections.correction_targets`), ``values``, ``bootstrap_value`` and
        ``truncation_values`` for `unroll` under the current weights."""
        return {k: np.asarray(v) for k, v in
                self._targets(*self._inputs(unroll)).items()}
