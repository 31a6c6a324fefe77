"""Argument checks shared by the public faces of tf_vtrace.

Every error names the argument the caller passed and what was expected, so a
wrong rank or dtype is caught at the call site rather than surfacing as an
opaque op error deep inside a `tf.scan`. Static facts (rank, known dims,
dtype) are checked at trace time for free; facts only known at run time (an
unknown T or B, action ranges) are asserted when `validate_args=True`.
"""

import numbers

import tensorflow as tf

__all__ = [
    "HALF_DTYPES",
    "to_float_tensor",
    "check_same_shape",
    "check_bootstrap_shape",
    "check_lambda",
    "check_threshold",
    "with_dependencies",
    "legacy_keras_active",
]

def legacy_keras_active():
    """True iff `tf.keras` is Keras 2 (tf_keras): TF_USE_LEGACY_KERAS=1 was set
    before TensorFlow was imported.

    Asks a class, not `tf.keras.__name__`: once TF-Agents is imported, the
    lazy `tf.keras` module reports the name ``tensorflow.keras`` under either
    Keras.
    """
    return tf.keras.layers.Layer.__module__.startswith("tf_keras")


# Computed in float32 and returned in the input dtype: the recursion
# accumulates T terms, which float16/bfloat16 cannot hold accurately.
HALF_DTYPES = (tf.float16, tf.bfloat16)


def to_float_tensor(value, name, dtype=None):
    """Converts `value` to a floating tensor of `dtype`, or raises naming `name`.

    Python numbers and numpy arrays are converted to `dtype` (the dtype of the
    reference argument). A `tf.Tensor` or `tf.Variable` of another float dtype
    is an error rather than a silent cast, as elsewhere in TensorFlow.
    """
    # dtype_hint converts Python numbers straight to `dtype` (0.9 in float64
    # stays 0.9, not float32's 0.8999999762); arrays keep their own dtype.
    tensor = tf.convert_to_tensor(value, dtype_hint=dtype, name=name)
    if not tensor.dtype.is_floating:
        raise TypeError(
            f"`{name}` must be a floating-point tensor, got dtype "
            f"{tensor.dtype.name}.")
    if dtype is None or tensor.dtype == dtype:
        return tensor
    if tf.is_tensor(value) or isinstance(value, tf.Variable):
        raise TypeError(
            f"`{name}` has dtype {tensor.dtype.name} but the reference input "
            f"has dtype {dtype.name}; pass all float inputs in one dtype.")
    return tf.cast(tensor, dtype)


def _layout(time_major):
    return "[T, B, ...] (time-major)" if time_major else "[B, T, ...] (batch-major)"


def check_same_shape(tensor, name, reference, reference_name, time_major,
                     validate_args):
    """Checks `tensor` has the shape of `reference`; returns run-time asserts."""
    rank = reference.shape.rank
    if tensor.shape.rank != rank:
        raise ValueError(
            f"`{name}` must have rank {rank} like `{reference_name}`, laid out "
            f"{_layout(time_major)}; got shape {tensor.shape}.")
    if not tensor.shape.is_compatible_with(reference.shape):
        raise ValueError(
            f"`{name}` has shape {tensor.shape} but `{reference_name}` has shape "
            f"{reference.shape}; both must be {_layout(time_major)} with the "
            "same T, B and trailing dims.")
    if not validate_args or tensor.shape.is_fully_defined():
        return []
    return [tf.debugging.assert_equal(
        tf.shape(tensor), tf.shape(reference),
        message=f"`{name}` and `{reference_name}` must have the same shape")]


def check_bootstrap_shape(bootstrap_value, reference, time_major,
                          validate_args):
    """Checks `bootstrap_value` is [B, ...]: `reference` without its T axis."""
    rank = reference.shape.rank
    time_axis = 0 if time_major else 1
    if bootstrap_value.shape.rank != rank - 1:
        raise ValueError(
            f"`bootstrap_value` must have rank {rank - 1} ([B, ...], the value "
            f"after the last step); got shape {bootstrap_value.shape}.")
    expected = reference.shape[:time_axis].concatenate(
        reference.shape[time_axis + 1:])
    if not bootstrap_value.shape.is_compatible_with(expected):
        raise ValueError(
            f"`bootstrap_value` has shape {bootstrap_value.shape} but must be "
            f"{expected} ([B, ...] of `values` with shape {reference.shape}).")
    if not validate_args or bootstrap_value.shape.is_fully_defined():
        return []
    expected_dynamic = tf.concat(
        [tf.shape(reference)[:time_axis], tf.shape(reference)[time_axis + 1:]],
        axis=0)
    return [tf.debugging.assert_equal(
        tf.shape(bootstrap_value), expected_dynamic,
        message="`bootstrap_value` must be [B, ...] of `values`")]


def check_lambda(lambda_, reference, time_major, validate_args):
    """λ as a Python float in [0, 1], or a tensor shaped like `reference`.

    Returns λ and run-time asserts.
    """
    if isinstance(lambda_, numbers.Real):
        if not 0.0 <= lambda_ <= 1.0:
            raise ValueError(f"`lambda_` must be in [0, 1], got {lambda_}.")
        return float(lambda_), []
    lambda_ = to_float_tensor(lambda_, "lambda_", reference.dtype)
    if lambda_.shape.rank is None:
        raise ValueError("`lambda_` must have a known rank (0, or that of "
                         "`values` for one λ per step).")
    if lambda_.shape.rank == 0:
        return lambda_, []
    return lambda_, check_same_shape(lambda_, "lambda_", reference, "values",
                                     time_major, validate_args)


def check_threshold(threshold, name, validate_args):
    """Checks a clipping threshold; `None` (no clipping) passes through.

    Returns the threshold (a Python float, a scalar float tensor, or None) and
    run-time asserts.
    """
    if threshold is None:
        return None, []
    if isinstance(threshold, numbers.Real):
        if not threshold > 0:
            raise ValueError(
                f"`{name}` must be a positive number or None, got {threshold}.")
        return float(threshold), []
    tensor = to_float_tensor(threshold, name)
    if tensor.shape.rank not in (None, 0):
        raise ValueError(f"`{name}` must be a scalar, got shape {tensor.shape}.")
    if not validate_args:
        return tensor, []
    return tensor, [tf.debugging.assert_positive(
        tensor, message=f"`{name}` must be positive")]


def with_dependencies(assertions, tensors):
    """Makes `tensors` wait on `assertions` in graph mode (eager runs them)."""
    if not assertions or tf.executing_eagerly():
        return tensors
    with tf.control_dependencies(assertions):
        return [tf.identity(t) for t in tensors]
