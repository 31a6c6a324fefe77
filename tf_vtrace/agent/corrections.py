r"""The off-policy corrections the IMPALA paper compares (Espeholt et al. 2018,
section 5.2 "V-trace analysis"), as losses for the agent's learner.

Data come from the behaviour policy μ (the actor's weights, `policy_lag`
updates old); the learner's policy is π. With ρ_t = π(a_t|x_t) / μ(a_t|x_t)
and ρ̄ = c̄ = 1 (the paper's and the library's defaults), each loss is the
mean over the T·B steps of

    ℓ_t = − ψ_t · A_t + baseline_cost · ½ (vs_t − V(x_t))²
          − entropy_cost · H(π(·|x_t))

(no gradient through vs_t, A_t or the weight; ψ_t is the policy-gradient
"score" below), with δ_t = r_t + γ_t V(x_{t+1}) − V(x_t):

``"vtrace"``  V-trace (paper eq. 1 and the policy gradient of section 4.2):
    vs_t = V(x_t) + Σ_{s≥t} (Π_{i<s} γ_i c_i) min(ρ̄, ρ_s) δ_s,
    c_i = λ min(c̄, ρ_i);  A_t = min(ρ̄, ρ_t) (r_t + γ_t vs_{t+1} − V(x_t));
    ψ_t = log π(a_t|x_t).  This is `tf_vtrace.impala.impala_loss` itself.
``"none"``  no correction: the same with ρ = c = 1 everywhere (log μ is
    replaced by log π without gradient): vs_t is the n-step return
    Σ_{s≥t} (Π_{i<s} γ_i) r_s + (Π γ) V(x_T), A_t = r_t + γ_t vs_{t+1} − V(x_t).
``"is1"``  1-step importance sampling: "no off-policy correction when
    optimising V(x)" (vs_t and A_t as in ``"none"``); the policy gradient of
    each step weighted by its own importance weight, ψ_t = ρ_t log π(a_t|x_t)
    with ρ_t not clipped (the paper names no clipping for this baseline; with
    ρ clipped at ρ̄ = 1 it would be V-trace's policy gradient on an uncorrected
    value target, not the baseline the paper reports).
``"epsilon"``  ε-correction: no importance weighting (vs_t, A_t as in
    ``"none"``), and ψ_t = log(π(a_t|x_t) + ε), ε = 1e-6: the paper's guard
    "to prevent log π(a) from becoming very small and leading to numerical
    instabilities" (after Babaeizadeh et al. 2017).

Truncated episodes (time limits) bootstrap from the learner's V of their
final observation in every correction (`tf_vtrace.impala.vtrace_targets`).
Under a `tf.distribute` strategy the mean divides by the global T·B, as
`impala_loss` with ``reduction="mean"`` does.

Whatever the correction, the diagnostics report the real ρ of the data:
``mean_rho``, ``rho_clipped_fraction`` (steps with ρ > e^0.001 ρ̄, ρ̄ = 1),
``ess_fraction`` = ESS / N with ESS = (Σρ)² / Σρ² over the N = T·B steps of
the batch (the effective sample size; 1 on-policy, 1/N when one step
carries all the weight; over all replicas' envs under a strategy) and
``kl`` = KL(μ ‖ π).
"""

import collections

import tensorflow as tf
import tensorflow_probability as tfp

from tf_vtrace import impala, vtrace
from tf_vtrace.agent.config import CORRECTIONS

__all__ = ["CORRECTIONS", "EPSILON", "CorrectionInputs",
           "behaviour_diagnostics", "correction_loss", "correction_targets"]

# The paper's ε of the ε-correction.
EPSILON = 1e-6


class CorrectionInputs(collections.namedtuple("CorrectionInputs", [
        "behaviour_logits", "target_logits", "actions", "discounts", "rewards",
        "values", "bootstrap_value", "truncated", "truncation_values",
        "dist_class"], defaults=[None])):
    """One unroll, time-major, as `impala_loss` takes it: the logits (the
    policy's parameters) and the actions are lists with one entry per
    action head; ``values`` [T, B] is differentiable, ``bootstrap_value``
    [B] and ``truncation_values`` not; ``dist_class`` is None (Categorical
    heads) or a function from one head's parameters to its distribution
    (`tf_vtrace.distributions.diagonal_gaussian`), as `impala_loss` takes
    it (`tf_vtrace.agent.policies.ActionPolicy.loss_heads`)."""


def _distributions(heads, dist_class):
    """One distribution per head."""
    if dist_class is None:
        return [tfp.distributions.Categorical(logits=h) for h in heads]
    return [dist_class(h) for h in heads]


def _head_log_probs(heads, actions, dist_class):
    """log p(a_t|x_t) per head."""
    if dist_class is None:
        return vtrace.multi_log_probs_from_logits_and_actions(heads, actions)
    return [d.log_prob(a) for d, a in zip(_distributions(heads, dist_class),
                                          actions)]


def _log_probs(heads, actions, dist_class=None):
    """log p(a_t|x_t) of the joint action: the sum over heads."""
    return tf.add_n(_head_log_probs(heads, actions, dist_class))


def _positional(inputs):
    return inputs[:7]


def _truncation(inputs):
    return dict(truncated=inputs.truncated,
                truncation_values=inputs.truncation_values)


def _on_policy_log_probs(inputs):
    """log π(a) per head without gradient, passed as log μ: ρ = c = 1."""
    return [tf.stop_gradient(log_prob) for log_prob in _head_log_probs(
        inputs.target_logits, inputs.actions, inputs.dist_class)]


def behaviour_diagnostics(inputs):
    """Mean ρ, fraction ρ > e^0.001 ρ̄ (ρ̄ = 1), ESS/N, KL(μ‖π)."""
    log_rhos = tf.stop_gradient(_log_rhos(inputs))
    rhos = tf.exp(log_rhos)
    kl = tf.add_n([tfp.distributions.kl_divergence(mu, pi) for mu, pi in zip(
        _distributions(inputs.behaviour_logits, inputs.dist_class),
        _distributions([tf.stop_gradient(pi) for pi in inputs.target_logits],
                       inputs.dist_class))])
    # Over the global batch under a strategy: a mean of the replicas' own
    # ratios would not be the batch's.
    sum_rho, sum_rho_squared = _global_sum(
        [tf.reduce_sum(rhos), tf.reduce_sum(tf.square(rhos))])
    return {"mean_rho": tf.reduce_mean(rhos),
            "rho_clipped_fraction": tf.reduce_mean(tf.cast(
                log_rhos > impala.CLIPPED_LOG_RATIO_MARGIN, tf.float32)),
            "ess_fraction": tf.square(sum_rho) / (
                sum_rho_squared * _global_steps(rhos)),
            "kl": tf.reduce_mean(kl)}


def correction_targets(correction, inputs, lambda_=1.0):
    """`(vs, A, ρ)` of `correction`: the value target, the policy-gradient
    advantage and the real ρ_t of the data (all without gradient).

    ``"vtrace"``: V-trace's vs and A (clipped ρ); the others: vs and A with
    ρ = c = 1. For ``"is1"`` the policy gradient is ρ_t A_t log π. `lambda_`
    is λ of the traces, c_i = λ min(c̄, ρ_i) (1: the module doc's vs).
    """
    _check(correction)
    log_mu = None if correction == "vtrace" else _on_policy_log_probs(inputs)
    targets = impala.vtrace_targets(*_positional(inputs), **_truncation(inputs),
                                    behaviour_action_log_probs=log_mu,
                                    dist_class=inputs.dist_class,
                                    lambda_=lambda_)
    return (targets.vs, targets.pg_advantages,
            tf.stop_gradient(tf.exp(_log_rhos(inputs))))


def _log_rhos(inputs):
    """log ρ_t = log π(a_t|x_t) − log μ(a_t|x_t), joint over the heads."""
    return (_log_probs(inputs.target_logits, inputs.actions, inputs.dist_class)
            - _log_probs(inputs.behaviour_logits, inputs.actions,
                         inputs.dist_class))


def _global_sum(values):
    """`values` summed over the replicas of a strategy (as they are without)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


def _global_steps(like):
    """T·B summed over the replicas of a strategy (equal slices)."""
    context = tf.distribute.get_replica_context()
    replicas = 1 if context is None else context.num_replicas_in_sync
    return tf.cast(tf.size(like) * replicas, like.dtype)


def _weighted_score_loss(correction, inputs, costs, epsilon, lambda_):
    """The loss of ``"is1"`` and ``"epsilon"`` (see the module doc)."""
    vs, advantages, rhos = correction_targets(correction, inputs, lambda_)
    log_pi = _log_probs(inputs.target_logits, inputs.actions, inputs.dist_class)
    score = (rhos * log_pi if correction == "is1"
             else tf.math.log(tf.exp(log_pi) + epsilon))
    entropy = tf.add_n([d.entropy() for d in _distributions(
        inputs.target_logits, inputs.dist_class)])
    steps = _global_steps(vs)
    terms = {
        "policy_loss": -tf.reduce_sum(score * advantages) / steps,
        "baseline_loss": costs["baseline_cost"] * 0.5 * tf.reduce_sum(
            tf.square(vs - inputs.values)) / steps,
        "entropy_loss": -costs["entropy_cost"] * tf.reduce_sum(entropy) / steps,
    }
    loss = tf.add_n(list(terms.values()))
    diagnostics = {k: tf.stop_gradient(v) for k, v in terms.items()}
    diagnostics["entropy"] = tf.stop_gradient(tf.reduce_mean(entropy))
    return loss, diagnostics


def correction_loss(correction, inputs, costs, epsilon=EPSILON, lambda_=1.0):
    """`(loss, diagnostics)` of one unroll under `correction` (module doc).

    Args:
      correction: One of `CORRECTIONS`.
      inputs: A `CorrectionInputs`.
      costs: A dict with ``baseline_cost`` and ``entropy_cost``.
      epsilon: ε of ``"epsilon"``.
      lambda_: λ of the traces, c_i = λ min(c̄, ρ_i) (`correction_targets`).

    Returns:
      The scalar loss (a mean over the global T·B steps) and a dict of the
      reduced loss terms plus `behaviour_diagnostics` of the data.
    """
    _check(correction)
    if correction in ("vtrace", "none"):
        log_mu = None if correction == "vtrace" else _on_policy_log_probs(inputs)
        loss, diagnostics = impala.impala_loss(
            *_positional(inputs), **_truncation(inputs),
            behaviour_action_log_probs=log_mu, reduction="mean",
            dist_class=inputs.dist_class, lambda_=lambda_, **costs)
    else:
        loss, diagnostics = _weighted_score_loss(correction, inputs, costs,
                                                 epsilon, lambda_)
    diagnostics.update(behaviour_diagnostics(inputs))
    return loss, diagnostics


def _check(correction):
    if correction not in CORRECTIONS:
        raise ValueError(f"`correction` must be one of {CORRECTIONS}, got "
                         f"{correction!r}.")
