"""The learner: one compiled `tf.function` step per unroll.

The step runs the network over the T + 1 observations of B envs, computes the
IMPALA loss with `tf_vtrace.impala.impala_loss` (time-limit truncations
bootstrap from the learner's own V of the episode's final observation), and
applies one Adam update (linear learning-rate decay to 0, global-norm
gradient clipping).

With ``config.correction = False`` (the ablation), log μ(a) is replaced by
log π(a) without gradient: log ρ = 0, so ρ = c = 1 and the loss is plain
actor-critic on the stale data. The diagnostics then still report the real
ρ = π/μ and KL(μ ‖ π) of the data, to show how off-policy it was.
"""

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tf_vtrace import impala
from tf_vtrace import vtrace
from tf_vtrace.agent import networks

__all__ = ["Learner", "LEARNER_INPUTS"]

# The unroll entries the learner step reads (see `tf_vtrace.agent.actor`).
LEARNER_INPUTS = ("observations", "actions", "behaviour_logits", "rewards",
                  "discounts", "truncated", "final_observations")


def _time_batch_apply(model, observations):
    """The model on [T, B, ...] observations as one [T·B, ...] batch."""
    shape = tf.shape(observations)
    flat = tf.reshape(observations, tf.concat([[-1], shape[2:]], 0))
    logits, values = model(flat, training=True)
    return (tf.reshape(logits, tf.concat([shape[:2], [-1]], 0)),
            tf.reshape(values, shape[:2]))


def _behaviour_diagnostics(behaviour_heads, target_heads, action_heads):
    """Mean ρ, fraction ρ > 1 and KL(μ ‖ π) of the data (no gradient)."""
    target = tf.add_n(vtrace.multi_log_probs_from_logits_and_actions(
        target_heads, action_heads))
    behaviour = tf.add_n(vtrace.multi_log_probs_from_logits_and_actions(
        behaviour_heads, action_heads))
    log_rhos = tf.stop_gradient(target - behaviour)
    kl = tf.add_n([tfp.distributions.kl_divergence(
        tfp.distributions.Categorical(logits=mu),
        tfp.distributions.Categorical(logits=tf.stop_gradient(pi)))
        for mu, pi in zip(behaviour_heads, target_heads)])
    return {"mean_rho": tf.reduce_mean(tf.exp(log_rhos)),
            "rho_clipped_fraction": tf.reduce_mean(
                tf.cast(log_rhos > 0., tf.float32)),
            "kl": tf.reduce_mean(kl)}


class Learner:
    """Owns the network and the optimizer; `step(unroll)` is one update.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      observation_space: The env's observation space.
      head_sizes: Actions per head.
    """

    def __init__(self, config, observation_space, head_sizes):
        self.config = config
        self.head_sizes = tuple(head_sizes)
        self.model = networks.build_network(
            observation_space, self.head_sizes, config.hidden_sizes,
            seed=config.seed)
        schedule = keras.optimizers.schedules.PolynomialDecay(
            config.learning_rate, config.num_updates, end_learning_rate=0.)
        self.optimizer = keras.optimizers.Adam(
            schedule, epsilon=1e-5, global_clipnorm=config.max_grad_norm)
        self.optimizer.build(self.model.trainable_variables)
        # No AutoGraph: the step has no Python control flow on tensors, and
        # converting the library's code took most of the first call's time.
        self._step = tf.function(self._train_step, autograph=False,
                                 jit_compile=config.jit_compile)
        self._targets = tf.function(self._vtrace_targets, autograph=False)

    @property
    def version(self):
        """Learner updates so far."""
        return int(self.optimizer.iterations.numpy())

    def get_weights(self):
        """The network's weights as a list of numpy arrays."""
        return self.model.get_weights()

    def _loss_inputs(self, observations, actions, behaviour_logits, rewards,
                     discounts, truncated, final_observations):
        """The positional and keyword inputs of `impala_loss` for one unroll."""
        logits, values = _time_batch_apply(self.model, observations)
        # V(x_{t+1}) of each truncated episode's own final observation, from
        # the learner's value like every other value in the targets.
        truncation_values = tf.cond(
            tf.reduce_any(truncated),
            lambda: tf.stop_gradient(
                _time_batch_apply(self.model, final_observations)[1]),
            lambda: tf.zeros_like(rewards))
        T = tf.shape(rewards)[0]
        target_heads = networks.split_heads(logits[:T], self.head_sizes)
        behaviour_heads = networks.split_heads(behaviour_logits, self.head_sizes)
        action_heads = tf.unstack(actions, len(self.head_sizes), axis=-1)
        args = (behaviour_heads, target_heads, action_heads, discounts, rewards,
                values[:T], values[T])
        kwargs = dict(truncated=truncated, truncation_values=truncation_values)
        if not self.config.correction:
            kwargs["behaviour_action_log_probs"] = [
                tf.stop_gradient(lp) for lp in
                vtrace.multi_log_probs_from_logits_and_actions(
                    target_heads, action_heads)]
        return args, kwargs

    def _loss_and_gradients(self, observations, actions, behaviour_logits,
                            rewards, discounts, truncated, final_observations):
        """`(loss, diagnostics, gradients)` of one unroll, nothing applied."""
        with tf.GradientTape() as tape:
            args, kwargs = self._loss_inputs(
                observations, actions, behaviour_logits, rewards, discounts,
                truncated, final_observations)
            loss, diagnostics = impala.impala_loss(
                *args, **kwargs, baseline_cost=self.config.baseline_cost,
                entropy_cost=self.config.entropy_cost, reduction="mean")
        gradients = tape.gradient(loss, self.model.trainable_variables)
        if not self.config.correction:
            diagnostics.update(_behaviour_diagnostics(*args[:3]))
        return loss, diagnostics, gradients

    def _apply(self, loss, diagnostics, gradients):
        """One optimizer update; the diagnostics with the loss and ‖g‖."""
        self.optimizer.apply_gradients(
            zip(gradients, self.model.trainable_variables))
        return dict(diagnostics, loss=loss,
                    gradient_norm=tf.linalg.global_norm(gradients))

    def _train_step(self, *inputs):
        return self._apply(*self._loss_and_gradients(*inputs))

    def _vtrace_targets(self, observations, actions, behaviour_logits, rewards,
                        discounts, truncated, final_observations):
        args, kwargs = self._loss_inputs(
            observations, actions, behaviour_logits, rewards, discounts,
            truncated, final_observations)
        targets = impala.vtrace_targets(*args, **kwargs)
        return {"vs": targets.vs, "pg_advantages": targets.pg_advantages,
                "values": args[5], "bootstrap_value": args[6],
                "truncation_values": kwargs["truncation_values"]}

    def _inputs(self, unroll):
        return [tf.convert_to_tensor(unroll[key]) for key in LEARNER_INPUTS]

    def step(self, unroll):
        """One update on `unroll` (an actor's dict); returns the diagnostics
        as Python floats, plus ``policy_lag`` (learner version − the
        unroll's policy version, before this update)."""
        lag = self.version - int(unroll["policy_version"])
        diagnostics = self._step(*self._inputs(unroll))
        return dict({k: float(v) for k, v in diagnostics.items()},
                    policy_lag=float(lag))

    def vtrace_targets(self, unroll):
        """What the loss is built on, without updating: a dict of numpy
        ``vs``, ``pg_advantages``, ``values``, ``bootstrap_value`` and
        ``truncation_values`` for `unroll` under the current weights."""
        return {k: np.asarray(v) for k, v in
                self._targets(*self._inputs(unroll)).items()}
