"""An independent float64 V-trace reference, written from the paper's definition.

Espeholt et al. (2018), eq. (1):

    vs_s = V(x_s) + Σ_{t=s}^{T−1} (Π_{i=s}^{t−1} γ_i c_i) δ_t

evaluated as that O(T²) double sum (not the backward recursion the library
uses), in numpy float64, time-major. Tests compare tf_vtrace against it.
"""
import numpy as np


def clip(rhos, threshold):
    return rhos if threshold is None else np.minimum(threshold, rhos)


def leaky_clip(rhos, threshold, alpha_):
    """Leaky V-trace (Zahavy et al. 2020): α·min(threshold, ρ) + (1 − α)·ρ."""
    return alpha_ * clip(rhos, threshold) + (1.0 - alpha_) * rhos


def vtrace_reference(log_rhos, discounts, rewards, values, bootstrap_value,
                     clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                     clip_c_threshold=1.0, lambda_=1.0, alpha_=1.0):
    """Returns (vs, pg_advantages) for time-major [T, B, ...] numpy inputs.

    `alpha_` < 1 is leaky V-trace: every clipped ratio (in δ, in c inside λ,
    and in the advantage) becomes `leaky_clip`.
    """
    log_rhos, discounts, rewards, values, bootstrap_value = (
        np.asarray(x, np.float64)
        for x in (log_rhos, discounts, rewards, values, bootstrap_value))
    lambda_ = np.broadcast_to(np.asarray(lambda_, np.float64), values.shape)
    rhos = np.exp(log_rhos)
    clipped_rhos = leaky_clip(rhos, clip_rho_threshold, alpha_)
    cs = lambda_ * leaky_clip(rhos, clip_c_threshold, alpha_)
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)

    num_steps = values.shape[0]
    vs = np.empty_like(values)
    for s in range(num_steps):
        total = values[s].copy()
        trace_product = np.ones_like(bootstrap_value)  # Π_{i=s}^{t−1} γ_i c_i
        for t in range(s, num_steps):
            total += trace_product * deltas[t]
            trace_product = trace_product * discounts[t] * cs[t]
        vs[s] = total

    next_vs = np.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    pg_advantages = leaky_clip(rhos, clip_pg_rho_threshold, alpha_) * (
        rewards + discounts * next_vs - values)
    return vs, pg_advantages


def log_softmax(logits):
    """log softmax over the last axis, float64, any leading dims."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def categorical_log_probs(logits, actions):
    """log softmax(logits)[action], float64, any leading dims."""
    return np.take_along_axis(
        log_softmax(logits), np.asarray(actions)[..., None], axis=-1)[..., 0]


def gae(discounts, rewards, values, bootstrap_value, lambda_):
    """Generalized advantage estimation (Schulman et al. 2016), float64."""
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    td_errors = rewards + discounts * next_values - values
    advantages = np.zeros_like(values, dtype=np.float64)
    running = np.zeros_like(bootstrap_value, dtype=np.float64)
    for t in reversed(range(values.shape[0])):
        running = td_errors[t] + discounts[t] * lambda_ * running
        advantages[t] = running
    return advantages
