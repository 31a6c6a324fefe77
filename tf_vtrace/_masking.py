"""Padding masks and episode truncation for the IMPALA loss (`impala.py`).

Private to tf_vtrace. Padding and truncation are handled by rewriting the
inputs, so that the core's recursion is reused and never duplicated: see
`masked_inputs`.
"""

import tensorflow as tf

from tf_vtrace import _checks, _tf_private


def expand_to_rank(mask, tensor):
    """`mask` [T, B, ...] with trailing unit axes up to `tensor`'s rank."""
    extra = tensor.shape.rank - mask.shape.rank
    return tf.reshape(mask, tf.concat(
        [tf.shape(mask), tf.ones([extra], tf.int32)], axis=0)) if extra else mask


# The integer type of each float's bit pattern, for `bitwise_where_valid`.
BITS = {tf.float16: tf.int16, tf.bfloat16: tf.int16, tf.float32: tf.int32,
         tf.float64: tf.int64}


def _computed_once(keep):
    """`keep` (0 or −1 per step), computed into memory of its own under XLA.

    XLA on CPU fuses a cheap producer into every loop that reads it. Where
    `valid` is a compare made in the same XLA program (Keras' float mask
    compared to 0 inside a model's `jit_compile` train step), the compare
    fused into the loop that masks the logits stopped it vectorizing, as a
    broadcast predicate does: each log-softmax exp ran 3x slower and the
    whole `fit` step took 2.2x the floor (docs/performance.md). XLA's
    optimization barrier is removed before fusion on CPU, and TensorFlow
    folds a reduction over copies of one tensor; a reduction over `keep` and
    zeros is kept, and is not fused into the loops that read it. Its min is
    `keep` itself, as no entry of `keep` exceeds 0.
    """
    if not _tf_private.in_xla_context():
        return keep
    return tf.reduce_min(tf.stack([keep, tf.zeros_like(keep)], axis=-1), axis=-1)


def bitwise_where_valid(valid, tensor):
    """`tf.where(valid, tensor, 0)` for floats with more axes than `valid`.

    The same selection as a bitwise AND of `tensor`'s bits with all ones
    (valid) or all zeros (padding, giving +0.0), broadcast over the trailing
    axes. XLA on CPU does not vectorize a fused loop whose select predicate
    is broadcast along the minor axis (per-step mask over logits): the log-
    softmax's exp then runs scalar, 2.4x slower, and the masked loss took 3x
    the unmasked one (docs/performance.md). An integer broadcast vectorizes.
    Bits are exact: NaN and inf stay where valid and vanish where not. The
    gradient is the same selection of the upstream gradient.
    """
    bits = BITS[tensor.dtype]
    # −1 is all ones. (A select here would broadcast a predicate again.)
    keep = expand_to_rank(_computed_once(-tf.cast(valid, bits)), tensor)

    def select(value):
        return tf.bitcast(tf.bitwise.bitwise_and(tf.bitcast(value, bits), keep),
                          value.dtype)

    @tf.custom_gradient
    def select_with_gradient(value):
        return select(value), select

    return select_with_gradient(tensor)


def where_valid(valid, tensor):
    """`tensor` where `valid`, zeros elsewhere (broadcast over trailing axes).

    `tf.where`, not a product: padding may hold NaN or inf, and 0 · NaN = NaN
    (in the gradient too) whereas `where` drops the unselected branch.
    """
    if tensor.shape.rank != valid.shape.rank and tensor.dtype in BITS:
        return bitwise_where_valid(valid, tensor)
    return tf.where(expand_to_rank(valid, tensor), tensor, tf.zeros_like(tensor))


def as_bool(tensor, name, reference, time_major):
    """A bool [T, B, ...] tensor from a bool or numeric per-step input."""
    tensor = tf.convert_to_tensor(tensor, name=name)
    asserts = _checks.check_same_shape(tensor, name, reference, "values",
                                       time_major)
    if tensor.dtype != tf.bool:
        tensor = tf.not_equal(tensor, tf.zeros([], tensor.dtype))
    return tensor, asserts


def values_read(valid, discounts):
    """Where V(x_t) is read with a weight: step t is valid, or step t − 1 is
    valid and not terminal (γ_{t−1} ≠ 0 multiplies it as that step's next
    value). The bootstrap V(x_T) likewise, from the last step. A value that
    only a γ = 0 multiplies is not read: its product is 0 either way, and
    NaN padding after a terminal step (0 · NaN = NaN) never enters."""
    continues = tf.logical_and(valid, tf.not_equal(discounts, 0))
    previous = tf.concat([tf.zeros_like(continues[:1]), continues[:-1]], axis=0)
    return tf.logical_or(valid, previous), continues[-1]


def masked_inputs(log_rhos, discounts, rewards, values, bootstrap_value,
                   lambda_, valid, truncated, truncation_values):
    """Rewrites the time-major inputs so that the core's recursion

    * stops at padding: a padded step gets log ρ = 0, γ = 0 and r = V(x_t), so
      its TD error is exactly 0 and its trace is cut — nothing leaks across
      it in either direction, and its vs equals its (sanitized) value;
    * bootstraps a truncated episode from V(x_{t+1}) of its own final state:
      a truncated step gets r' = r + γ·V_final and γ' = 0, so that
      δ_t = ρ_t (r + γ V_final − V(x_t)) and A_t uses V_final too, while the
      next trajectory's values (the following steps) are never read.

    Values at padded steps are only kept where a valid step reads them as its
    next value V(x_{t+1}) (the bootstrap of a shorter unroll); the others are
    replaced by 0 so that garbage (NaN, inf) there cannot reach a valid step.
    """
    value_needed, bootstrap_needed = values_read(valid, discounts)
    values = where_valid(value_needed, values)
    bootstrap_value = tf.where(bootstrap_needed, bootstrap_value,
                               tf.zeros_like(bootstrap_value))
    truncated = tf.logical_and(truncated, valid)
    final_values = tf.where(truncated, truncation_values,
                            tf.zeros_like(truncation_values))
    rewards = tf.where(truncated, rewards + discounts * final_values, rewards)
    discounts = tf.where(truncated, tf.zeros_like(discounts), discounts)
    log_rhos = where_valid(valid, log_rhos)
    rewards = tf.where(valid, rewards, values)
    discounts = where_valid(valid, discounts)
    if lambda_.shape.rank:
        lambda_ = where_valid(valid, lambda_)
    return log_rhos, discounts, rewards, values, bootstrap_value, lambda_
