"""Argument checks shared by the public faces of tf_vtrace.

Every error names the argument the caller passed and what was expected, so a
wrong rank or dtype is caught at the call site rather than surfacing as an
opaque op error deep inside a `tf.scan`. Static facts (rank, known dims,
dtype) are checked at trace time for free; facts only known at run time (an
unknown T or B, action ranges) are asserted when `validate_args=True`.

Ranks are checked before shapes, as scalable_agent, trfl and RLlib do: an
input of the wrong rank is reported as such (their tests match the phrase
"must have rank"), not as a mismatch of some dimension.
"""

import collections
import numbers

import tensorflow as tf

__all__ = [
    "HALF_DTYPES",
    "check_choice",
    "to_float_tensor",
    "check_rank",
    "check_same_shape",
    "SequenceShape",
    "broadcast_shape",
    "check_bootstrap_rank",
    "check_bootstrap_shape",
    "to_lambda",
    "check_lambda_rank",
    "check_threshold",
    "check_alpha",
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


def check_choice(value, name, choices):
    """Raises unless `value` is one of `choices`, naming the argument `name`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")


# Computed in float32 and returned in the input dtype: the recursion
# accumulates T terms, which float16/bfloat16 cannot hold accurately.
HALF_DTYPES = (tf.float16, tf.bfloat16)


def to_float_tensor(value, name, dtype=None):
    """Converts `value` to a floating tensor of `dtype`, or raises naming `name`.

    `dtype` is the dtype of the reference argument (`values`): any other float
    input — a Python number, a numpy array, a `tf.Tensor` or `tf.Variable` —
    is cast to it. One rule for all three keeps eager calls and `tf.function`
    (where numpy arguments arrive as tensors) in agreement. Non-float inputs
    are an error.
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
    return tf.cast(tensor, dtype)


def _layout(time_major):
    return "[T, B, ...] (time-major)" if time_major else "[B, T, ...] (batch-major)"


def check_rank(tensor, name, rank, time_major, reference_name="values"):
    """Raises unless `tensor` has `rank`, the rank of `reference_name`."""
    if tensor.shape.rank != rank:
        raise ValueError(
            f"`{name}` must have rank {rank} like `{reference_name}`, laid out "
            f"{_layout(time_major)}; got shape {tensor.shape}.")


def check_same_shape(tensor, name, reference, reference_name, time_major,
                     validate_args):
    """Checks `tensor` has the shape of `reference`; returns run-time asserts."""
    check_rank(tensor, name, reference.shape.rank, time_major, reference_name)
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


class SequenceShape(collections.namedtuple(
        "SequenceShape", ["static", "owners"])):
    """The shape that the sequence inputs broadcast to.

    Attributes:
      static: Its static `tf.TensorShape`.
      owners: Per axis, the `(name, tensor)` whose size the axis takes, or
        None where every input has size 1 there.
    """
    __slots__ = ()

    def dynamic(self):
        """The run-time shape, an int32 vector."""
        return tf.stack([
            tf.constant(1) if owner is None else (
                tf.constant(dim) if dim is not None else tf.shape(owner[1])[axis])
            for axis, (owner, dim) in enumerate(
                zip(self.owners, self.static.as_list()))])


def broadcast_shape(named, time_major, validate_args):
    """The common shape of the sequence inputs, checked; and run-time asserts.

    The peers' rule (scalable_agent, trfl, RLlib broadcast the elementwise
    arithmetic): every sequence input has the rank of `values`; the time axis
    has one size T; every other axis has one size or size 1, which broadcasts.
    Only a 1 known when traced broadcasts: axes of unknown size must agree at
    run time (asserted when `validate_args`).

    Args:
      named: `(name, tensor)` pairs, `values` first, ranks already checked.
      time_major: The layout, which says which axis is time.
      validate_args: Assert at run time that axes of unknown size agree.

    Returns:
      A `SequenceShape` and a list of run-time asserts.
    """
    time_axis = 0 if time_major else 1
    rank = named[0][1].shape.rank
    owners, dims = [None] * rank, [1] * rank
    for name, tensor in named:
        for axis, dim in enumerate(tensor.shape.as_list()):
            if dim == 1 and axis != time_axis:
                continue  # Broadcasts.
            if owners[axis] is None:
                owners[axis], dims[axis] = (name, tensor), dim
            elif dim is not None and dims[axis] is None:
                owners[axis], dims[axis] = (name, tensor), dim  # Known is better.
            elif dim is not None and dim != dims[axis]:
                owner_name, owner = owners[axis]
                raise ValueError(
                    f"`{name}` has shape {tensor.shape} but `{owner_name}` has "
                    f"shape {owner.shape} (axis {axis}: {dim} vs {dims[axis]}). "
                    f"All sequence inputs must be {_layout(time_major)} with the "
                    "same T; every other axis must have the same size or size 1 "
                    "(broadcast).")
    shape = SequenceShape(tf.TensorShape(dims), owners)
    if not validate_args:
        return shape, []
    asserts = []
    for name, tensor in named:
        for axis, dim in enumerate(tensor.shape.as_list()):
            owner = owners[axis]
            if dim is not None or owner is None or owner[1] is tensor:
                continue
            expected = (dims[axis] if dims[axis] is not None
                        else tf.shape(owner[1])[axis])
            asserts.append(tf.debugging.assert_equal(
                tf.shape(tensor)[axis], expected,
                message=f"`{name}` must have the size of `{owner[0]}` along "
                        f"axis {axis} (only a size 1 known when traced "
                        "broadcasts)"))
    return shape, asserts


def check_bootstrap_rank(bootstrap_value, rank):
    """Raises unless `bootstrap_value` is [B, ...]: one rank below `values`."""
    if bootstrap_value.shape.rank != rank - 1:
        raise ValueError(
            f"`bootstrap_value` must have rank {rank - 1} ([B, ...], the value "
            f"after the last step); got shape {bootstrap_value.shape}.")


def check_bootstrap_shape(bootstrap_value, shape, time_major, validate_args):
    """Checks `bootstrap_value` is `shape` (a `SequenceShape`) without its T axis.

    Returns run-time asserts.
    """
    time_axis = 0 if time_major else 1
    expected = shape.static[:time_axis].concatenate(shape.static[time_axis + 1:])
    if not bootstrap_value.shape.is_compatible_with(expected):
        raise ValueError(
            f"`bootstrap_value` has shape {bootstrap_value.shape} but must be "
            f"{expected} ([B, ...] of the sequence inputs' shape "
            f"{shape.static}).")
    if not validate_args or (bootstrap_value.shape.is_fully_defined()
                             and expected.is_fully_defined()):
        return []
    dynamic = shape.dynamic()
    expected_dynamic = tf.concat(
        [dynamic[:time_axis], dynamic[time_axis + 1:]], axis=0)
    return [tf.debugging.assert_equal(
        tf.shape(bootstrap_value), expected_dynamic,
        message="`bootstrap_value` must be [B, ...] of `values`")]


def _check_unit_interval(value, name):
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be in [0, 1], got {value}.")
    return float(value)


def to_lambda(lambda_, dtype):
    """λ as a Python float in [0, 1], or a float tensor of `dtype`."""
    if isinstance(lambda_, numbers.Real):
        return _check_unit_interval(lambda_, "lambda_")
    return to_float_tensor(lambda_, "lambda_", dtype)


def check_lambda_rank(lambda_, rank):
    """A tensor λ is a scalar or one value per step (the rank of `values`)."""
    if tf.is_tensor(lambda_) and lambda_.shape.rank not in (0, rank):
        raise ValueError(
            f"`lambda_` must have rank 0 (one λ) or rank {rank} (one per step, "
            f"like `values`); got shape {lambda_.shape}.")


def _scalar_tensor(value, name):
    tensor = to_float_tensor(value, name)
    if tensor.shape.rank not in (None, 0):
        raise ValueError(f"`{name}` must be a scalar, got shape {tensor.shape}.")
    return tensor


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
    tensor = _scalar_tensor(threshold, name)
    if not validate_args:
        return tensor, []
    return tensor, [tf.debugging.assert_positive(
        tensor, message=f"`{name}` must be positive")]


def check_alpha(alpha_, validate_args):
    """Checks leaky V-trace's α: a number in [0, 1] or a scalar float tensor.

    Returns α (a Python float or a scalar tensor) and run-time asserts.
    """
    if isinstance(alpha_, numbers.Real):
        return _check_unit_interval(alpha_, "alpha_"), []
    tensor = _scalar_tensor(alpha_, "alpha_")
    if not validate_args:
        return tensor, []
    return tensor, [
        tf.debugging.assert_non_negative(tensor, message="`alpha_` must be >= 0"),
        tf.debugging.assert_less_equal(
            tensor, tf.ones([], tensor.dtype), message="`alpha_` must be <= 1")]


def with_dependencies(assertions, tensors):
    """Makes `tensors` wait on `assertions` in graph mode (eager runs them)."""
    if not assertions or tf.executing_eagerly():
        return tensors
    with tf.control_dependencies(assertions):
        return [tf.identity(t) for t in tensors]
