"""The V-trace kernel compiled once per kind of call, and the eager calls'
signature cache.

Private to tf_vtrace. Generic over the kernel's body: `vtrace.py` passes its
own `_vtrace_kernel` in (the recursion in the caller's layout and dtype), so
this module never imports `vtrace.py` (which imports it), as `_fused` is
generic over the loss. Two caches:

- `concrete_kernel`: the body traced once for unknown T and B, per layout,
  dtype, rank, scan and kind of each hyperparameter (`hyperparameter_key`).
  A Python number other than the defaults enters as an input, so an
  annealed schedule compiles nothing new.
- `EAGER_KERNELS`: the kernel of each eager call signature (dtypes, shapes,
  kinds of hyperparameters, options) whose full call succeeded. The checks
  of shapes and dtypes depend only on these, so a later eager call of that
  signature goes straight to its kernel: about 40 µs of Python instead of
  about 300 (docs/performance.md). Only calls the full path would hand to
  the kernel unchanged are kept: eager tensors of `values`' dtype, all
  sequences of one shape (no broadcast), Python-number hyperparameters.
"""

import collections
import functools

import tensorflow as tf

from tf_vtrace import _checks, _dispatch, _tensors

__all__ = ["Hyperparameters", "hyperparameter_key", "concrete_kernel",
           "call_kernel", "EAGER_KERNELS", "call_remembered", "remember"]

# λ, ρ̄, ρ̄_pg, c̄ and α as the kernel takes them: Python numbers (compiled in)
# or tensors (inputs of the compiled function); see `concrete_kernel`.
Hyperparameters = collections.namedtuple(
    "Hyperparameters", ["lambda_", "clip_rho_threshold", "clip_pg_rho_threshold",
                        "clip_c_threshold", "alpha_"])


def hyperparameter_key(value):
    """How ρ̄, ρ̄_pg, c̄, λ or α enters the kernel.

    None and 1 (the defaults; α = 1 and None build fewer ops) are compiled
    in. Another Python number, already checked, is a scalar input: a new value
    (an annealed schedule) compiles nothing. A tensor is an input whose range
    the kernel checks.
    """
    if value is None or (isinstance(value, float) and value == 1.0):
        return ("constant", value)
    if isinstance(value, float):
        return ("number",)
    return ("tensor", value.dtype, value.shape.rank)


# Bounded: one entry per layout, dtype, rank and kind of hyperparameter.
@functools.lru_cache(maxsize=64)
def concrete_kernel(body, jit_compile, time_major, dtype, rank,
                    hyperparameter_keys, scan):
    """`body` (`vtrace._vtrace_kernel`) traced once for unknown T and B, and
    cached.

    Python-number hyperparameters are compiled in as constants; tensor ones
    are inputs, whose ranges the kernel checks: it then returns a third
    output, the code of `_checks.pack`. Calling the concrete function directly
    skips `tf.function`'s per-call argument matching, most of the cost of an
    eager call.
    """
    constants = [key[1] if key[0] == "constant" else None
                 for key in hyperparameter_keys]
    tensor_slots = [i for i, key in enumerate(hyperparameter_keys)
                    if key[0] != "constant"]
    checked = [Hyperparameters._fields[i] for i, key in enumerate(hyperparameter_keys)
               if key[0] == "tensor"]

    def kernel(log_rhos, discounts, rewards, values, bootstrap_value,
               *tensor_hyperparameters):
        hyperparameters = list(constants)
        for slot, tensor in zip(tensor_slots, tensor_hyperparameters):
            hyperparameters[slot] = tensor
        hyperparameters = Hyperparameters(*hyperparameters)
        with _checks.collecting() as checks:
            _checks.require_hyperparameters(
                {name: getattr(hyperparameters, name) for name in checked})
        code = _checks.pack(checks)
        outputs = body(log_rhos, discounts, rewards, values, bootstrap_value,
                       hyperparameters, time_major=time_major, scan=scan)
        # Wrong values give NaN, not finite wrong targets, where the code
        # cannot be raised (inside a caller's XLA function).
        outputs = [_checks.poison(code, output) for output in outputs]
        return outputs if code is None else outputs + [code]

    sequence = tf.TensorSpec([None] * rank, dtype)
    specs = [sequence] * 4 + [tf.TensorSpec([None] * (rank - 1), dtype)]
    specs += [_hyperparameter_spec(hyperparameter_keys[i], dtype) for i in tensor_slots]
    return tf.function(kernel, jit_compile=jit_compile).get_concrete_function(
        *specs)


def _hyperparameter_spec(key, dtype):
    if key[0] == "number":
        return tf.TensorSpec([], _tensors.compute_dtype(dtype))
    return tf.TensorSpec(None if key[2] is None else [None] * key[2], key[1])


def call_kernel(body, jit_compile, time_major, tensors, hyperparameters, scan):
    """Runs the cached kernel of `body` (`scan` resolved) with no gradient
    recorded through it.

    Targets carry no gradient. Keeping the tape from recording the call also
    matters because XLA cannot hand the scan's intermediates to a backward
    pass. Pausing the tape costs nothing; in a graph, stop_gradient on the two
    outputs also covers `tf.gradients` (two ops, not one per input).
    """
    values = tensors[3]
    keys = tuple(hyperparameter_key(h) for h in hyperparameters)
    kernel = concrete_kernel(body, bool(jit_compile), bool(time_major),
                             values.dtype, values.shape.rank, keys, scan)
    dtype = _tensors.compute_dtype(values.dtype)
    inputs = list(tensors) + [
        h if key[0] == "tensor" else _tensors.number_tensor(h, dtype)
        for h, key in zip(hyperparameters, keys) if key[0] != "constant"]
    outputs = _dispatch.call_unrecorded(kernel, *inputs)
    if len(outputs) == 3:  # Tensor hyperparameters, checked in the kernel.
        _checks.raise_packed(outputs.pop())
    if not tf.executing_eagerly():
        outputs = [tf.stop_gradient(output) for output in outputs]
    for output in outputs:
        output.set_shape(values.shape)  # The trace only knows the rank.
    return outputs


# --- The eager calls' signature cache ------------------------------------------

EAGER_KERNELS = _dispatch.SignatureCache(256)


def _eager_signature(tensors, hyperparameters, flags):
    """The cache key of an eager call, or None when it is not cacheable."""
    eager_tensor = _dispatch.eager_tensor_type()
    if not all(type(t) is eager_tensor for t in tensors):
        return None
    if not all(type(h) is float or h is None for h in hyperparameters):
        return None
    return (tuple(t.dtype for t in tensors), tuple(tuple(t.shape) for t in tensors),
            tuple(hyperparameter_key(h) for h in hyperparameters), flags)


def _flags_key(jit_compile, time_major, scan):
    """The options' part of the cache key. With the types: 1 == True would
    otherwise find the entry of a checked True and skip the flags' check."""
    return jit_compile, time_major, scan, type(jit_compile), type(time_major)


def _check_numbers(hyperparameters):
    """The Python-number checks of the full path (values vary per call)."""
    lambda_, *thresholds, alpha_ = hyperparameters
    _checks.to_lambda(lambda_, None)
    for name, threshold in zip(("clip_rho_threshold", "clip_pg_rho_threshold",
                                "clip_c_threshold"), thresholds):
        _checks.check_threshold(threshold, name)
    _checks.check_alpha(alpha_)


def call_remembered(tensors, hyperparameters, flags, validate_args):
    """`(signature, [vs, pg_advantages])` of an eager call straight from the
    kernel of its signature; `(signature, None)` when the signature has not
    passed the full path's checks (the caller then takes it and `remember`s).

    Args:
      tensors: The five inputs of `vtrace.from_importance_weights`, in order.
      hyperparameters: λ, ρ̄, ρ̄_pg, c̄ and α, as given.
      flags: `(jit_compile, time_major, scan)`, as given.
      validate_args: As given (checked to be a bool, not part of the key).
    """
    hyperparameters = tuple(
        float(h) if isinstance(h, (int, float)) and not isinstance(h, bool)
        else h for h in hyperparameters)
    signature = _eager_signature(tensors, hyperparameters, _flags_key(*flags))
    kernel = EAGER_KERNELS.get(signature)
    if kernel is None:
        return signature, None
    # The signature leaves `validate_args` out: in eager code its shape
    # checks passed when the kernel was cached.
    _checks.check_flags(validate_args=validate_args)
    _check_numbers(hyperparameters)
    dtype = _tensors.compute_dtype(tensors[3].dtype)
    inputs = list(tensors) + [
        _tensors.number_tensor(h, dtype) for h in hyperparameters
        if hyperparameter_key(h)[0] == "number"]
    return signature, _dispatch.call_concrete_unrecorded(kernel, inputs)


def remember(body, signature, scan):
    """Keeps the kernel of `body` (`scan` resolved) for a `signature` (from
    `call_remembered`) whose full call just succeeded, where the full path
    handed the tensors to the kernel unchanged."""
    if signature is None:
        return
    dtypes, shapes, keys, flags = signature
    if len(set(dtypes)) != 1 or len(set(shapes[:4])) != 1 or len(shapes[3]) < 2:
        return
    jit_compile, time_major = flags[:2]
    EAGER_KERNELS.remember(signature, concrete_kernel(
        body, jit_compile, time_major, dtypes[3], len(shapes[3]), keys, scan))
