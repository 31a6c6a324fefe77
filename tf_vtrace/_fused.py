"""The IMPALA loss as one compiled XLA call, with its gradient.

Private to tf_vtrace. Generic over the loss: `impala.py` passes its own
`_loss_sums` in, so this module never imports `impala.py` (which imports it).
The records' tensor fields become the compiled function's arguments; the
rest (Python numbers, strings, None) is compiled in, keyed by the records.
"""

import functools

import tensorflow as tf

from tf_vtrace import _checks, _dispatch, _tensors, _tf_private

__all__ = ["compiled_call", "fused_loss_sums"]


def _as_tensors(value):
    """`value` as tensors (a list stays a list), or None if it is not one.

    A variable is read here, outside the compiled call, so that the caller's
    tape records the read and the gradient reaches the variable.
    """
    if isinstance(value, (list, tuple)):
        converted = [_as_tensors(v) for v in value]
        return None if any(c is None for c in converted) else converted
    if isinstance(value, tf.Variable):
        return tf.convert_to_tensor(value)
    return value if isinstance(value, tf.Tensor) else None


def _split_record(record, tensors_only):
    """({field: tensors}, `record` with those fields None), or None when a
    field of a `tensors_only` record is numpy or a Python sequence (the
    regular path converts those)."""
    tensors = {}
    for field, value in zip(record._fields, record):
        converted = None if value is None else _as_tensors(value)
        if field == "mask" and converted is not None and converted.dtype != tf.bool:
            # To bool out here (as `_masking.as_bool` would inside), as
            # `keras._packed_loss` does, where it measured cheaper than inside.
            converted = tf.not_equal(converted, tf.zeros([], converted.dtype))
        if converted is not None:
            tensors[field] = converted
        elif value is not None and tensors_only:
            return None
    return tensors, record._replace(**dict.fromkeys(tensors))


def _numbers_as_inputs(record, names, dtype, compiled_in):
    """`record` with its Python-number fields `names` as cached scalar tensors,
    inputs of the compiled call, so that a schedule (an annealed λ or cost)
    compiles nothing new; but those `compiled_in` (values that build fewer
    ops) stay static."""
    numbers = {name: getattr(record, name) for name in names}
    return record._replace(**{
        name: _tensors.number_tensor(float(value), dtype)
        for name, value in numbers.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        and not compiled_in(value)})


def _split_for_compiling(inputs, options, costs):
    """(tensor arguments, hashable static records), or None when the loss
    cannot run as one compiled call (see `impala_loss`'s `jit_compile`)."""
    if not options.jit_compile or options.dist_class is not None:
        return None
    dtype = _tensors.compute_dtype(tf.convert_to_tensor(inputs.values).dtype)
    options = _numbers_as_inputs(
        options, ("clip_rho_threshold", "clip_pg_rho_threshold", "clip_c_threshold",
                  "lambda_", "alpha_"), dtype, lambda value: value == 1)
    costs = _numbers_as_inputs(costs, ("baseline_cost", "entropy_cost", "kl_cost"),
                               dtype, lambda value: value == 0)
    splits = [_split_record(inputs, tensors_only=True),
              _split_record(options._replace(model=None), tensors_only=False),
              _split_record(costs, tensors_only=False)]
    if splits[0] is None:
        return None
    tensors, static = zip(*splits)
    try:
        hash(static)
    except TypeError:  # e.g. λ as a numpy array
        return None
    return tensors, static


def _records_loss_sums(static, tensors):
    """`loss_sums` on the records rebuilt from their tensor fields (the body
    of `fused_loss_sums`' compiled call)."""
    loss_sums, with_diagnostics, records = static
    records = [record._replace(**fields) for record, fields in zip(records, tensors)]
    return loss_sums(*records, with_diagnostics)


def _records_differentiable(tensors):
    """What the loss is differentiated with respect to: π's logits, V."""
    return tf.nest.flatten(tensors[0]["target_policy_logits"]) + [tensors[0]["values"]]


def _checked_body(body, static, tensors):
    """`body(static, tensors)` with the value checks it `require`s packed into
    a code (`_checks.pack`; 0 when none) and its first output poisoned."""
    with _checks.collecting() as checks:
        outputs = body(static, tensors)
    code = _checks.pack(checks)
    if code is None:
        code = tf.constant(0)
    return (_checks.poison(code, outputs[0]), *outputs[1:]), code


@functools.lru_cache(maxsize=32)
def _compiled_loss_sums(body, differentiable, static, with_gradients,
                        exact_shapes):
    """`body(static, tensors)` as one XLA function; with the gradient of its
    first output (a scalar) with respect to `differentiable(tensors)` if asked.

    Traced per input shape, never relaxed, and callers whose shapes are all
    known (`exact_shapes`: only a key of the cache, not read in the body; no
    default, since `lru_cache` keys an omitted argument apart from a given
    one) get a function of their own: a trace with unknown
    dimensions would serve every later shape it covers, and an agent
    learner's step that called such a trace recompiled its XLA program at
    every update (docs/performance.md).

    The targets inside carry no gradient (the core's recursion is under
    stop_gradient), so the inner tape differentiates only the log-probs and
    the terms: XLA fuses forward and backward into one call.

    The value checks made inside (actions in range, tensor hyperparameters)
    come back as a code (`_checks.pack`), raised by the caller. Where they
    fail the loss is NaN and the gradient 0: inside a caller's XLA function,
    where nothing can raise, the NaN loss reports the bad batch while the
    weights stay finite.
    """
    def call(tensors):
        if not with_gradients:
            return _checked_body(body, static, tensors)
        wrt = differentiable(tensors)
        with tf.GradientTape() as tape:
            tape.watch(wrt)
            outputs, code = _checked_body(body, static, tensors)
        gradients = tape.gradient(outputs[0], wrt,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
        ok = tf.equal(code, 0)
        return outputs, [tf.where(ok, g, tf.zeros_like(g)) for g in gradients], code

    return tf.function(call, jit_compile=True, autograph=False)


def _with_gradients(total, gradients, differentiable):
    """`total`, differentiable with respect to `differentiable` by the
    precomputed `gradients` (d total / d input), scaled by the upstream."""
    @tf.custom_gradient
    def attach(*unused_inputs):
        def gradient(upstream):
            return [g * tf.cast(upstream, g.dtype) for g in gradients]
        return tf.identity(total), gradient

    return attach(*differentiable)


def compiled_call(body, differentiable, static, tensors):
    """`body(static, tensors)`, a tuple whose first output is a scalar, run as
    one XLA call; under a tape the call also returns the gradient of that
    scalar with respect to `differentiable(tensors)`, which a custom gradient
    hands back.

    `body` and `differentiable` are module-level functions and `static`
    hashable: together they key the compiled function. Inside a caller's XLA
    function XLA inlines the call (measured as fast as the same loss written
    inline). Value checks are raised here (`_checks.raise_packed`).
    """
    exact = _dispatch.shapes_known(tensors)
    if not _tf_private.may_record():
        outputs, code = _dispatch.call_traced(_compiled_loss_sums(
            body, differentiable, static, False, exact), tensors, exact)
        _checks.raise_packed(code)
        return outputs
    compiled = _compiled_loss_sums(body, differentiable, static, True, exact)
    (total, *rest), gradients, code = _dispatch.call_traced(compiled, tensors,
                                                            exact)
    _checks.raise_packed(code)
    return (_with_gradients(total, gradients, differentiable(tensors)), *rest)


def fused_loss_sums(loss_sums, inputs, options, costs, with_diagnostics):
    """`loss_sums(inputs, options, costs, with_diagnostics)` in one XLA call,
    or None where that cannot run.

    Under a tape (training), the call also returns the gradient, which a
    custom gradient hands back: one compiled call for the whole step's loss
    math, instead of separate log-prob, V-trace and backward calls with
    uncompiled glue between them. Without a tape (metrics, evaluation) it
    skips the gradient.
    """
    split = _split_for_compiling(inputs, options, costs)
    if split is None:
        return None
    tensors, static = split
    return compiled_call(_records_loss_sums, _records_differentiable,
                         (loss_sums, with_diagnostics, static), tensors)
