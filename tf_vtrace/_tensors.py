"""Tensor helpers shared by the V-trace core and the IMPALA loss.

Private to tf_vtrace: `vtrace.py` and `impala.py` both use them, so they
live here rather than in either (as TFP keeps its shared helpers in
`internal/`). It imports tfp itself and nothing of tf_vtrace's, so that
neither user closes a cycle through it.
"""

import functools

import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions


def as_dtype(value, dtype):
    """A Python number or tensor as a tensor of `dtype`, without a detour.

    `tf.cast(0.9, tf.float64)` would go through float32 (0.8999999762...);
    `tf.constant(0.9, tf.float64)` keeps the number exact.
    """
    return tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(
        value, dtype)


@functools.lru_cache(maxsize=256)
def number_tensor(value, dtype):
    """The Python number `value` as an eager scalar of `dtype`, cached, so that
    a hyperparameter that changes from call to call (an annealed λ) enters a
    compiled call as an input rather than as a new constant (a new compile).
    Created eagerly even when first asked for inside a graph, so that every
    graph may capture it."""
    with tf.init_scope():
        return tf.constant(value, dtype)


def compute_dtype(dtype):
    """float16/bfloat16 are computed in float32; other dtypes as they are."""
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def is_one(value):
    """Whether a hyperparameter is the Python number 1 (not a tensor)."""
    return not tf.is_tensor(value) and value == 1


def clipped_ratio(log_rhos, threshold, alpha_=1.0):
    """min(threshold, ρ), computed as exp(min(log threshold, log ρ)).

    Clipping before the exponential keeps the result finite for any finite
    log ρ: exp(1000.) overflows float32, exp(min(1000., log 1.)) does not.

    Leaky V-trace (Zahavy et al. 2020, rlax's `leaky_vtrace`) mixes in the
    unclipped ratio: α·min(threshold, ρ) + (1 − α)·ρ. That part is not
    bounded and overflows where ρ does; it is written exp(log(1 − α) + log ρ),
    exactly 0 at α = 1 even then (never 0·inf). α = 1 (the Python number)
    builds the plain clipped ratio, with no extra op.
    """
    if threshold is None:
        return tf.exp(log_rhos)  # Unclipped, whatever α mixes.
    log_threshold = tf.math.log(as_dtype(threshold, log_rhos.dtype))
    clipped = tf.exp(tf.minimum(log_rhos, log_threshold))
    if is_one(alpha_):
        return clipped
    alpha_ = as_dtype(alpha_, log_rhos.dtype)
    return alpha_ * clipped + tf.exp(tf.math.log1p(-alpha_) + log_rhos)


def shift_in_bootstrap(sequence, bootstrap_value):
    """[x_1, ..., x_{T-1}, bootstrap]: the time-major sequence one step ahead."""
    return tf.concat([sequence[1:], bootstrap_value[tf.newaxis]], axis=0)


def to_time_major(tensor, time_major):
    """[B, T, ...] -> [T, B, ...] (the same permutation maps back)."""
    if time_major or tensor.shape.rank == 0:
        return tensor
    perm = [1, 0] + list(range(2, tensor.shape.rank))
    return tf.transpose(tensor, perm)


def make_distribution(policy_logits, dist_class, model):
    """The action distribution of one head, checked to be a tfp Distribution."""
    if dist_class is None:
        return tfd.Categorical(logits=policy_logits)
    if not callable(dist_class):
        raise TypeError(
            "`dist_class` must be None (Categorical) or a callable building a "
            f"tfp Distribution; got {type(dist_class).__name__}. (Clipping "
            "thresholds come after `dist_class` and `model` in this API: pass "
            "them by keyword.)")
    dist = dist_class(policy_logits) if model is None else dist_class(
        policy_logits, model)
    if not isinstance(dist, tfd.Distribution):
        raise TypeError(
            "`dist_class` must build a tfp.distributions.Distribution from a "
            f"head's parameters; it returned {type(dist).__name__}.")
    return dist


def as_head_list(heads, name):
    """A list of per-head tensors; a lone tensor is one head."""
    if isinstance(heads, (list, tuple)):
        if not heads:
            raise ValueError(f"`{name}` must list at least one action head.")
        return list(heads)
    return [heads]
