"""rlax peer: rlax.vtrace_td_error_and_advantage (per sequence [T]) vmapped over B, jitted."""

import jax
import jax.numpy as jnp
import rlax

BASELINE_COST = 0.5
ENTROPY_COST = 0.01
LOGITS_KEYS = ("behaviour_logits", "target_logits", "actions", "discounts",
               "rewards", "values", "bootstrap_value")


def _vtrace_one_sequence(log_rhos, discounts, rewards, values, bootstrap_value):
    values_tp1 = jnp.concatenate([values[1:], bootstrap_value[None]])
    # lambda_=1: rlax's pg target mixes in V(x_{t+1}) when lambda < 1, tf_vtrace does not.
    out = rlax.vtrace_td_error_and_advantage(
        values, values_tp1, rewards, discounts, jnp.exp(log_rhos), lambda_=1.0,
        clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)
    return out.errors + values, out.pg_advantage


# rlax is per sequence; time-major [T, B] inputs map over axis 1 (bootstrap [B]: axis 0).
_vtrace_batch = jax.vmap(_vtrace_one_sequence, in_axes=(1, 1, 1, 1, 0), out_axes=1)


def vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
    vs, pg_advantages = _vtrace_batch(log_rhos, discounts, rewards, values, bootstrap_value)
    return jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg_advantages)


def _loss(target_logits, values, behaviour_logits, actions, discounts, rewards,
          bootstrap_value):
    target_log_probs = jax.nn.log_softmax(target_logits)
    taken_log_probs = jnp.take_along_axis(target_log_probs, actions[..., None], -1)[..., 0]
    behaviour_taken = jnp.take_along_axis(
        jax.nn.log_softmax(behaviour_logits), actions[..., None], -1)[..., 0]
    log_rhos = jax.lax.stop_gradient(taken_log_probs - behaviour_taken)
    vs, pg_advantages = vtrace(log_rhos, discounts, rewards, jax.lax.stop_gradient(values),
                               bootstrap_value)
    pg_loss = -jnp.sum(taken_log_probs * pg_advantages)
    baseline_loss = 0.5 * jnp.sum(jnp.square(vs - values))
    entropy = -jnp.sum(jnp.exp(target_log_probs) * target_log_probs)
    return pg_loss + BASELINE_COST * baseline_loss - ENTROPY_COST * entropy


@jax.jit
def learner_step(behaviour_logits, target_logits, actions, discounts, rewards, values,
                 bootstrap_value):
    loss, (grad_logits, grad_values) = jax.value_and_grad(_loss, argnums=(0, 1))(
        target_logits, values, behaviour_logits, actions, discounts, rewards, bootstrap_value)
    return loss, grad_logits, grad_values


_vtrace_jit = jax.jit(vtrace)


def _blocking(fn, args):
    return lambda: jax.block_until_ready(fn(*args))  # JAX dispatch is async


def build_importance_weights(name, inputs):
    args = [jnp.asarray(inputs[k]) for k in
            ("log_rhos", "discounts", "rewards", "values", "bootstrap_value")]
    return _blocking(_vtrace_jit, args)


def build_learner_step(name, inputs):
    return _blocking(learner_step, [jnp.asarray(inputs[k]) for k in LOGITS_KEYS])


def preload(name):
    """Nothing to import lazily here."""


def to_numpy(outputs):
    import numpy as np

    return [np.asarray(x) for x in outputs]


BUILDERS = {"importance_weights": build_importance_weights, "learner_step": build_learner_step}
