"""Argument checks shared by the public faces of tf_vtrace.

Every error names the argument the caller passed and what was expected, so a
wrong rank or dtype is caught at the call site rather than surfacing as an
opaque op error deep inside a `tf.scan`. Static facts (rank, known dims,
dtype) are checked at trace time for free; facts only known at run time (an
unknown T or B, action ranges, tensor hyperparameters) are checked when the
graph runs, always: see "Value checks that hold under XLA" below.

Ranks are checked before shapes, as scalable_agent, trfl and RLlib do: an
input of the wrong rank is reported as such (their tests match the phrase
"must have rank"), not as a mismatch of some dimension.
"""

import collections
import contextlib
import functools
import numbers
import operator
import re
import threading

import numpy as np
import tensorflow as tf

from tf_vtrace import _tensors, _tf_private

__all__ = [
    "HALF_DTYPES",
    "check_choice",
    "is_bool",
    "refuse_bool",
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
    "assert_shapes_equal",
    "enforced",
    "legacy_keras_active",
    "require",
    "collecting",
    "pack",
    "raise_packed",
    "refuse_unraisable",
    "check_hyperparameters",
    "check_sequences",
    "check_matches",
    "check_heads",
    "check_head_log_probs",
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


def check_loss_costs(costs, reductions):
    """Raises unless the `_options.LossCosts` record holds a reduction among
    `reductions` and numbers (or tensors) as its weights."""
    check_choice(costs.reduction, "reduction", reductions)
    check_flags(cross_replica=costs.cross_replica)
    for cost_name in ("baseline_cost", "entropy_cost", "kl_cost"):
        cost = getattr(costs, cost_name)
        if not isinstance(cost, numbers.Real) and not tf.is_tensor(cost):
            raise TypeError(f"`{cost_name}` must be a number, got {cost!r}.")


def positive_ints(values):
    """`values` (a sequence of Python or numpy integers) as a list of Python
    ints, or None unless it is non-empty and every one is >= 1."""
    try:
        ints = [operator.index(value) for value in values]
    except TypeError:  # Not a sequence, or a float or string in it.
        return None
    return ints if ints and min(ints) >= 1 else None


def check_action_sizes(action_sizes):
    """`action_sizes` as a list of Python ints; raises unless it is a
    non-empty sequence of integers >= 1 (the logits of each action head)."""
    sizes = positive_ints(action_sizes)
    if sizes is None:
        raise ValueError("`action_sizes` must be a non-empty list of integers "
                         f">= 1 (the logits of each head), got {action_sizes!r}.")
    return sizes


# Computed in float32 and returned in the input dtype: the recursion
# accumulates T terms, which float16/bfloat16 cannot hold accurately.
HALF_DTYPES = (tf.float16, tf.bfloat16)


def to_tensor(value, name, **kwargs):
    """`tf.convert_to_tensor(value, name=name, **kwargs)`, its error (None,
    a ragged list, an object) naming the argument."""
    try:
        return tf.convert_to_tensor(value, name=name, **kwargs)
    except (TypeError, ValueError) as error:
        raise type(error)(f"`{name}` must be a tensor or an array, got "
                          f"{type(value).__name__}: {error}") from None


def to_head_tensors(heads, name):
    """`heads` (a tensor, or a list or tuple with one per action head) as a
    list of tensors, its errors naming `name`."""
    return [to_tensor(head, name) for head in _tensors.as_head_list(heads, name)]


def is_bool(value):
    """Whether `value` is a bool, or an array or tensor (or list) of bools,
    which `dtype_hint` would quietly turn into 0.0 and 1.0."""
    if isinstance(value, (bool, np.bool_)):
        return True
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, tf.DType):
        return dtype == tf.bool
    if isinstance(dtype, np.dtype):
        return dtype == np.bool_
    if isinstance(value, (list, tuple)):
        return np.asarray(value).dtype == np.bool_
    return False


def refuse_bool(value, name):
    """Raises naming `name` when `value` holds bools: a `dones` array passed
    as `discounts` would otherwise be read as the inverted discounts."""
    if is_bool(value):
        hint = (": an episode's `dones` are not discounts, pass "
                "gamma * (1 - dones)") if name == "discounts" else ""
        raise TypeError(f"`{name}` must be floating point, got bools{hint}.")


def to_float_tensor(value, name, dtype=None):
    """Converts `value` to a floating tensor of `dtype`, or raises naming `name`.

    `dtype` is the dtype of the reference argument (`values`): any other float
    input — a Python number, a numpy array, a `tf.Tensor` or `tf.Variable` —
    is cast to it. One rule for all three keeps eager calls and `tf.function`
    (where numpy arguments arrive as tensors) in agreement. Non-float inputs
    are an error.
    """
    refuse_bool(value, name)
    # dtype_hint converts Python numbers straight to `dtype` (0.9 in float64
    # stays 0.9, not float32's 0.8999999762); arrays keep their own dtype.
    tensor = to_tensor(value, name, dtype_hint=dtype)
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


def check_same_shape(tensor, name, reference, reference_name, time_major):
    """Checks `tensor` has the shape of `reference`; returns run-time asserts
    (graph only, where a dimension is unknown when traced)."""
    check_rank(tensor, name, reference.shape.rank, time_major, reference_name)
    if not tensor.shape.is_compatible_with(reference.shape):
        raise ValueError(
            f"`{name}` has shape {tensor.shape} but `{reference_name}` has shape "
            f"{reference.shape}; both must be {_layout(time_major)} with the "
            "same T, B and trailing dims.")
    if tensor.shape.is_fully_defined() and reference.shape.is_fully_defined():
        return []
    return [assert_shapes_equal(
        tf.shape(tensor), tf.shape(reference),
        f"`{name}` must have the shape of `{reference_name}`, "
        f"{_layout(time_major)}")]


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


def broadcast_shape(named, time_major):
    """The common shape of the sequence inputs, checked; and run-time asserts.

    The peers' rule (scalable_agent, trfl, RLlib broadcast the elementwise
    arithmetic): every sequence input has the rank of `values`; the time axis
    has one size T; every other axis has one size or size 1, which broadcasts.
    Only a 1 known when traced broadcasts: axes of unknown size must agree at
    run time (asserted in the graph; eagerly every size is known). T >= 1.

    Args:
      named: `(name, tensor)` pairs, `values` first, ranks already checked.
      time_major: The layout, which says which axis is time.

    Returns:
      A `SequenceShape` and a list of run-time asserts.
    """
    time_axis = 0 if time_major else 1
    owners, dims = _axis_owners(named, time_major)
    if dims[time_axis] == 0:
        raise ValueError(
            f"`values` has shape {named[0][1].shape}: T = 0 steps. V-trace needs "
            "T >= 1 (pad an empty unroll to one step with `mask` False).")
    shape = SequenceShape(tf.TensorShape(dims), owners)
    return shape, _broadcast_asserts(named, shape, time_axis)


def _axis_owners(named, time_major):
    """Per axis, the `(name, tensor)` whose size the axis takes (a known size
    before an unknown one; None where every input has size 1) and that size;
    raises where two known sizes differ and neither is a broadcasting 1."""
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
    return owners, dims


def _broadcast_asserts(named, shape, time_axis):
    """The run-time asserts of the sizes unknown when traced: T >= 1, and
    each input's unknown size that of its axis' owner."""
    owners, dims = shape.owners, shape.static.as_list()
    asserts = []
    if dims[time_axis] is None:
        asserts.append(assert_shapes_equal(
            tf.minimum(tf.shape(owners[time_axis][1])[time_axis], 1), 1,
            "`values` must have T >= 1 steps (T = 0 given)"))
    for name, tensor in named:
        for axis, dim in enumerate(tensor.shape.as_list()):
            owner = owners[axis]
            if dim is not None or owner is None or owner[1] is tensor:
                continue
            expected = (dims[axis] if dims[axis] is not None
                        else tf.shape(owner[1])[axis])
            asserts.append(assert_shapes_equal(
                tf.shape(tensor)[axis], expected,
                f"`{name}` must have the size of `{owner[0]}` along axis "
                f"{axis} (only a size 1 known when traced broadcasts)"))
    return asserts


def check_bootstrap_rank(bootstrap_value, rank):
    """Raises unless `bootstrap_value` is [B, ...]: one rank below `values`."""
    if bootstrap_value.shape.rank != rank - 1:
        raise ValueError(
            f"`bootstrap_value` must have rank {rank - 1} ([B, ...], the value "
            f"after the last step); got shape {bootstrap_value.shape}.")


def check_bootstrap_shape(bootstrap_value, shape, time_major):
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
    if (bootstrap_value.shape.is_fully_defined()
            and expected.is_fully_defined()):
        return []
    dynamic = shape.dynamic()
    expected_dynamic = tf.concat(
        [dynamic[:time_axis], dynamic[time_axis + 1:]], axis=0)
    return [assert_shapes_equal(
        tf.shape(bootstrap_value), expected_dynamic,
        "`bootstrap_value` must be [B, ...] of `values`")]


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


def check_threshold(threshold, name):
    """Checks a clipping threshold; `None` (no clipping) passes through.

    Returns the threshold: a Python float, a scalar float tensor (whose value
    the kernel checks when it runs: `require_hyperparameters`), or None.
    """
    if threshold is None:
        return None
    if isinstance(threshold, numbers.Real):
        if not threshold > 0:
            raise ValueError(
                f"`{name}` must be a positive number or None, got {threshold}.")
        return float(threshold)
    return _scalar_tensor(threshold, name)


def check_alpha(alpha_):
    """Checks leaky V-trace's α: a number in [0, 1], or a scalar float tensor
    (checked when the kernel runs: `require_hyperparameters`)."""
    if isinstance(alpha_, numbers.Real):
        return _check_unit_interval(alpha_, "alpha_")
    return _scalar_tensor(alpha_, "alpha_")


# What a tensor hyperparameter must hold, checked inside the kernel.
_HYPERPARAMETER_RANGES = {
    "lambda_": ("in [0, 1]", lambda x: (x >= 0) & (x <= 1)),
    "clip_rho_threshold": ("positive", lambda x: x > 0),
    "clip_pg_rho_threshold": ("positive", lambda x: x > 0),
    "clip_c_threshold": ("positive", lambda x: x > 0),
    "alpha_": ("in [0, 1]", lambda x: (x >= 0) & (x <= 1)),
}


def require_hyperparameters(named):
    """`require`s each tensor hyperparameter of `named` (name -> value) in its
    range; Python numbers were checked when the call was made."""
    for name, value in named.items():
        if tf.is_tensor(value):
            expected, in_range = _HYPERPARAMETER_RANGES[name]
            require(in_range(value), f"`{name}` (a tensor) must be {expected}.")


def with_dependencies(assertions, tensors):
    """Makes `tensors` wait on `assertions` in graph mode (eager runs them)."""
    if not assertions or tf.executing_eagerly():
        return tensors
    with tf.control_dependencies(assertions):
        return [tf.identity(t) for t in tensors]


def _node_name(message):
    """`message` up to its first parenthesis, as a graph node name."""
    words = re.sub(r"[^A-Za-z0-9]+", "_", message.split("(")[0]).strip("_")
    return words[:120] or "tf_vtrace_check"


def assert_shapes_equal(actual, expected, message):
    """An op that fails unless the int32 shapes (or sizes) `actual` and
    `expected` are equal, `message` saying what was expected.

    An assert (InvalidArgumentError with `message` when it runs), except
    inside an XLA function, which drops asserts but knows every size when it
    compiles: there a fill whose size is -1 where the check fails, which XLA
    rejects when it compiles the function ("negative dimension size"), naming
    the node, which is named after `message`.
    """
    if not _tf_private.in_xla_context():
        return tf.debugging.assert_equal(actual, expected, message=message)
    ok = tf.reduce_all(tf.equal(actual, expected))
    return tf.fill(tf.where(ok, 0, -1)[None], 0, name=_node_name(message))


# Per thread, the graph asserts of the `enforced` calls being traced.
_PENDING = threading.local()


def _pending(assertion):
    """Hands the graph assert `assertion` to the `enforced` call being
    traced, whose outputs will wait on it."""
    stack = getattr(_PENDING, "stack", None)
    if stack:
        stack[-1].append(assertion)


def enforced(function):
    """`function` (a public entry point) with its run-time checks enforced
    in a TF1 graph: its tensor outputs wait on the asserts that `require`
    and `raise_packed` made while it was traced.

    Eagerly the checks raise where they are made; inside a `tf.function`
    its automatic control dependencies run every assert. A TF1 graph
    (`tf.compat.v1.Session`) runs only what the fetched outputs need, so
    there the outputs carry the asserts as control dependencies.
    """
    @functools.wraps(function)
    def checked(*args, **kwargs):
        if tf.executing_eagerly() or tf.inside_function():
            return function(*args, **kwargs)
        stack = getattr(_PENDING, "stack", None)
        if stack is None:
            stack = _PENDING.stack = []
        stack.append([])
        try:
            outputs = function(*args, **kwargs)
        finally:
            assertions = stack.pop()
        if stack:  # The enclosing entry point's outputs wait on them too.
            stack[-1].extend(assertions)
        if not assertions:
            return outputs
        with tf.control_dependencies(assertions):
            return tf.nest.map_structure(
                lambda x: tf.identity(x) if tf.is_tensor(x) else x, outputs)
    return checked


# --- Value checks that hold under XLA ----------------------------------------
#
# XLA drops assert ops, so a check on values cannot raise inside a compiled
# call. The library's compiled calls (the V-trace kernel, the fused loss, the
# Categorical log-prob) instead return an int32 code, one bit per failed check,
# computed inside with their other outputs, and poison their outputs with NaN
# when it is not 0. Outside the call the code is raised: eagerly as a
# ValueError (one scalar read), in a graph by an assert op. Only inside a
# caller's own XLA function (where no op can raise) is the NaN the signal.

# Message -> bit, assigned on first use; a code decodes with no per-trace state.
_BITS = {}
_BITS_LOCK = threading.Lock()
_COLLECTING = threading.local()


def _bit(message):
    with _BITS_LOCK:
        if message not in _BITS:
            if len(_BITS) == 31:
                raise RuntimeError("Too many distinct run-time checks for one code.")
            _BITS[message] = 1 << len(_BITS)
        return _BITS[message]


@contextlib.contextmanager
def collecting():
    """Collects `require`d checks (while tracing a compiled call) into a list
    of (bool scalar, message), for `pack`, instead of raising them."""
    stack = getattr(_COLLECTING, "stack", None)
    if stack is None:
        stack = _COLLECTING.stack = []
    stack.append([])
    try:
        yield stack[-1]
    finally:
        stack.pop()


def require(ok, message):
    """Requires every element of the bool tensor `ok`; `message` names the
    argument and what was expected.

    Inside `collecting` the check joins the compiled call's code; otherwise it
    is raised here (see `raise_packed`).
    """
    if ok.shape.rank != 0:
        ok = tf.reduce_all(ok)
    stack = getattr(_COLLECTING, "stack", None)
    if stack:
        stack[-1].append((ok, message))
    elif tf.executing_eagerly():
        if not bool(ok):
            raise ValueError(message)
    elif not _tf_private.in_xla_context():
        _pending(tf.debugging.Assert(ok, [message], name="tf_vtrace_check"))


def pack(checks):
    """The int32 code of `(ok, message)` checks: the bits of the failed ones."""
    if not checks:
        return None
    by_message = collections.defaultdict(list)
    for ok, message in checks:  # One bit per message, however many checks.
        by_message[message].append(ok)
    return tf.add_n([tf.where(tf.reduce_all(tf.stack(oks)), 0, _bit(message))
                     for message, oks in by_message.items()])


def poison(code, tensor):
    """`tensor`, or NaN everywhere when `code` says a check failed."""
    if code is None:
        return tensor
    return tf.where(tf.equal(code, 0), tensor, tf.constant(float("nan"), tensor.dtype))


def _messages(code):
    return [message for message, bit in _BITS.items() if code & bit]


def raise_packed(code):
    """Raises the checks that `code` (from `pack`) says failed.

    Eagerly a ValueError; in a graph an assert op (InvalidArgumentError when it
    runs); inside an enclosing `collecting` the bits join its code; inside a
    caller's XLA function nothing (XLA drops asserts: the NaN outputs remain).
    """
    if code is None:
        return
    if tf.executing_eagerly():
        failed = _messages(int(code))
        if failed:
            raise ValueError(" ".join(failed))
        return
    stack = getattr(_COLLECTING, "stack", None)
    if stack:
        for message, bit in list(_BITS.items()):
            stack[-1].append((tf.equal(tf.bitwise.bitwise_and(code, bit), 0), message))
        return
    if _tf_private.in_xla_context():
        return
    # Typed: with no check registered yet the lists are empty.
    messages = tf.constant(list(_BITS), tf.string)
    bits = tf.constant(list(_BITS.values()), code.dtype)
    failed = tf.boolean_mask(messages, tf.not_equal(tf.bitwise.bitwise_and(code, bits), 0))
    _pending(tf.debugging.Assert(tf.equal(code, 0), [failed], name="tf_vtrace_checks"))


def refuse_unraisable(validate_args):
    """`validate_args=True` inside a caller's XLA function cannot raise at run
    time (XLA drops asserts): refuse it when traced rather than check nothing."""
    if validate_args and not getattr(_COLLECTING, "stack", None) and (
            _tf_private.in_xla_context()):
        raise ValueError(
            "`validate_args=True` cannot check values inside an XLA-compiled "
            "function (tf.function(jit_compile=True), or a Keras model compiled "
            "with jit_compile=True): XLA drops assert ops. Call it from eager "
            "code or a plain tf.function (the library's own jit_compile=True is "
            "fine), or pass validate_args=False: invalid values then give NaN "
            "outputs.")


def check_flags(**flags):
    """Raises a TypeError naming the first flag that is not a bool (or a
    numpy bool): a string such as "False" is true, and None is false."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"`{name}` must be a bool, got {value!r}.")


def check_hyperparameters(options):
    """Checks the Python-number hyperparameters of a `VTraceOptions` record
    (tensors are checked when the kernel runs): λ and α in [0, 1], the
    thresholds positive or None; and its flags are bools. Returns nothing;
    raises a ValueError (a TypeError for a flag)."""
    check_flags(time_major=options.time_major, jit_compile=options.jit_compile,
                validate_args=options.validate_args)
    for name in ("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold"):
        check_threshold(getattr(options, name), name)
    if isinstance(options.lambda_, numbers.Real):
        _check_unit_interval(options.lambda_, "lambda_")
    if isinstance(options.alpha_, numbers.Real):
        _check_unit_interval(options.alpha_, "alpha_")



def check_matches(tensor, label, reference, expected_text, extra_axes=0):
    """Raises unless `tensor` is `reference`'s shape exactly (no axis
    broadcasts) plus `extra_axes` trailing axes of any size; returns run-time
    asserts for the dims unknown when traced (graph only).

    `label` names the argument (with its head index), `expected_text` says
    what it should be, e.g. "`values`' shape [T, B, ...] plus the logits' axis".
    """
    rank = reference.shape.rank
    leading = tensor.shape[:rank] if tensor.shape.rank is not None else tensor.shape
    if (tensor.shape.rank is not None and tensor.shape.rank != rank + extra_axes) or (
            not leading.is_compatible_with(reference.shape)):
        raise ValueError(
            f"{label} has shape {tensor.shape} but must be {expected_text}: "
            f"{reference.shape}{' + [P]' if extra_axes else ''} (no axis broadcasts).")
    if leading.is_fully_defined() and reference.shape.is_fully_defined():
        return []
    return [assert_shapes_equal(
        tf.shape(tensor)[:rank], tf.shape(reference),
        f"{label} must be {expected_text}")]


def _label(name, index, count):
    return f"`{name}`" if count == 1 else f"`{name}[{index}]`"


def _check_value_axis(values, target_logits):
    """Blames `values` [T, B, 1] (a Dense(1) value head, unsqueezed) where
    the logits [T, B, P] say the steps are [T, B]."""
    if (values.shape.rank is not None and values.shape.rank >= 3
            and values.shape[-1] == 1 and target_logits.shape.rank == values.shape.rank
            and target_logits.shape[:-1].is_compatible_with(values.shape[:-1])):
        raise ValueError(
            f"`values` has shape {values.shape} but the logits' shape "
            f"{target_logits.shape} says the steps are {values.shape[:-1]}: "
            "squeeze the value head's last axis, tf.squeeze(values, -1).")


def check_heads(target_logits, behaviour_logits, actions, values, categorical):
    """The per-head inputs against `values` [T, B, ...], exactly: the peers'
    log-prob ops never broadcast them. Returns run-time asserts.

    Each head's target logits are `values`' shape plus the parameter axis
    (Categorical), its behaviour logits (None: not given) the target logits'
    shape, its actions `values`' shape (Categorical; a `dist_class` may add
    event axes).
    """
    for name, heads in (("actions", actions),
                        ("behaviour_policy_logits", behaviour_logits)):
        if heads is not None and len(heads) != len(target_logits):
            raise ValueError(
                f"`{name}` has {len(heads)} heads but `target_policy_logits` "
                f"has {len(target_logits)}; pass one entry per action head.")
    count, asserts = len(target_logits), []
    for k, (target, head_actions) in enumerate(zip(target_logits, actions)):
        if categorical:
            _check_value_axis(values, target)
            asserts += check_matches(
                target, _label("target_policy_logits", k, count), values,
                "`values`' shape plus the logits' axis", extra_axes=1)
            asserts += check_matches(
                head_actions, _label("actions", k, count), values, "`values`' shape")
        if behaviour_logits is not None:
            asserts += check_matches(
                behaviour_logits[k], _label("behaviour_policy_logits", k, count),
                target, "the shape of the target policy's logits")
    return asserts


def check_head_log_probs(log_probs, name, values):
    """Each head's log-probs must be `values`' shape (a `dist_class`'s too)."""
    asserts = []
    for k, head in enumerate(log_probs):
        asserts += check_matches(head, _label(name, k, len(log_probs)), values,
                                 "`values`' shape (one log-prob per step)")
    return asserts


def check_sequences(log_rhos, discounts, rewards, values, bootstrap_value,
                    lambda_, time_major):
    """The shape contract of every entry point (docs/api.md, "Shapes"):
    converts the inputs to `values`' dtype and checks ranks, then shapes.

    Returns the five tensors in argument order, λ (possibly a Python float),
    the `SequenceShape` the sequences broadcast to, and the run-time asserts.
    """
    values = to_float_tensor(values, "values")
    if values.shape.rank is None or values.shape.rank < 2:
        layout = "[T, B, ...]" if time_major else "[B, T, ...]"
        raise ValueError(
            f"`values` must have a known rank >= 2, laid out {layout}; got "
            f"shape {values.shape}.")
    rank = values.shape.rank
    sequences = [("values", values)] + [
        (name, to_float_tensor(sequence, name, values.dtype))
        for name, sequence in (("log_rhos", log_rhos), ("discounts", discounts),
                               ("rewards", rewards))]
    bootstrap_value = to_float_tensor(
        bootstrap_value, "bootstrap_value", values.dtype)
    lambda_ = to_lambda(lambda_, values.dtype)
    # Every rank before any shape, as the peers check them.
    for name, sequence in sequences[1:]:
        check_rank(sequence, name, rank, time_major)
    check_bootstrap_rank(bootstrap_value, rank)
    check_lambda_rank(lambda_, rank)
    if tf.is_tensor(lambda_) and lambda_.shape.rank:
        sequences.append(("lambda_", lambda_))  # Per step: a sequence too.
    shape, asserts = broadcast_shape(sequences, time_major)
    asserts += check_bootstrap_shape(bootstrap_value, shape, time_major)
    tensors = [dict(sequences)[name] for name in
               ("log_rhos", "discounts", "rewards", "values")]
    return tensors + [bootstrap_value], lambda_, shape, asserts
