"""Eager dispatch: trace once per signature, call the concrete function flat.

Private to tf_vtrace. An eager call of a `tf.function` binds its arguments,
looks up its trace and matches the structured signature each time: about
0.1–0.4 ms of Python per call (docs/performance.md). The library's eager
paths (the V-trace kernel, the log-probs, the fused loss) and the agent's
(the policy, the learner's step, the weights, the recorder) keep the
concrete function per signature instead and call it flat, with no tape
recording the call where the outputs carry no gradient.

It builds on `_tf_private` (the one home of private TensorFlow API) and
imports nothing else of tf_vtrace's; the agent imports this module, never
`_tf_private`.
"""

import functools
import weakref

import tensorflow as tf

from tf_vtrace import _tf_private

__all__ = ["call_unrecorded", "call_concrete", "call_concrete_unrecorded",
           "shapes_known", "concrete_function", "structure_key", "call_traced",
           "eager_tensor_type", "SignatureCache"]


def call_unrecorded(fn, *args):
    """`fn(*args)`, with no tape recording the call.

    With the private API the tape is paused around the call; without it the
    outputs are cut from the gradient instead (`tf.stop_gradient`).
    """
    with _tf_private.paused():
        outputs = fn(*args)
    if not _tf_private.PAUSES:
        outputs = tf.nest.map_structure(tf.stop_gradient, outputs)
    return outputs


def call_concrete(concrete, tensors):
    """`concrete(*tensors)`, recorded by the tapes as the public call is, for
    eager calls whose flat tensor inputs (a list, dtypes exact) are known to
    match: called flat (`_tf_private.call_flat`); without it, the public call.
    """
    if not _tf_private.FLAT_CALLS:
        return concrete(*tensors)
    return _tf_private.call_flat(concrete, tensors)


def call_concrete_unrecorded(concrete, tensors):
    """`concrete(*tensors)` with no tape recording the call, for eager calls
    whose flat tensor inputs (a list, dtypes exact) are known to match.

    Called flat with the tape paused, which skips the matching of the
    arguments against the structured signature; without the private API,
    `call_unrecorded` (the public call).
    """
    if not _tf_private.FLAT_CALLS:
        return call_unrecorded(concrete, *tensors)
    with _tf_private.paused():
        return _tf_private.call_flat(concrete, tensors)


def shapes_known(tensors):
    """Whether every tensor of the structure `tensors` has a fully known
    shape: such callers get compiled functions of their own (`_fused`,
    `vtrace._categorical_log_prob`), never a trace with unknown dimensions."""
    return all(t.shape.is_fully_defined() for t in tf.nest.flatten(tensors))


# function -> {signature: its concrete function}; dropped with the function.
_CONCRETE = weakref.WeakKeyDictionary()


def concrete_function(function, args, flat, structure=None):
    """`function.get_concrete_function(*args)`, kept per `structure` and the
    shapes and dtypes of `flat` (the tensors of `args`, flattened), for an
    eager caller that then calls it flat (`call_concrete`): looking it up
    through `tf.function` and matching its structured signature cost about
    0.1 ms a call (`vtrace._categorical_log_prob`, `_fused`)."""
    signature = (structure, tuple((tuple(t.shape), t.dtype) for t in flat))
    concretes = _CONCRETE.setdefault(function, {})
    concrete = concretes.get(signature)
    if concrete is None:
        concrete = concretes[signature] = function.get_concrete_function(*args)
    return concrete


def structure_key(tensors):
    """The structure of `tensors` (a tuple of tensors and of dicts of
    tensors or flat lists of them) as a hashable key; None for any other."""
    key = []
    for part in tensors:
        if isinstance(part, tf.Tensor):
            key.append(-1)
            continue
        if not isinstance(part, dict):
            return None
        for name, value in part.items():
            if isinstance(value, list):
                if not all(isinstance(v, tf.Tensor) for v in value):
                    return None
                key.append((name, len(value)))
            elif isinstance(value, tf.Tensor):
                key.append((name, -1))
            else:
                return None
        key.append(None)  # (the end of one dict)
    return tuple(key)


def call_traced(compiled, tensors, exact):
    """`compiled(tensors)` (a `tf.function` of one structured argument) with
    no tape recording the call; eagerly with known shapes (`exact`), its
    concrete function called flat (`tf.function`'s lookup and the structured
    signature's matching took about 0.2 ms of an eager step at T=20, B=32)."""
    structure = (structure_key(tensors) if exact and _tf_private.FLAT_CALLS
                 and tf.executing_eagerly() else None)
    if structure is None:
        # Traced first: a tape opened while recording is paused would not record.
        return call_unrecorded(compiled.get_concrete_function(tensors), tensors)
    flat = tf.nest.flatten(tensors)
    return call_concrete_unrecorded(concrete_function(
        compiled, (tensors,), flat, structure), flat)


@functools.cache
def eager_tensor_type():
    """The type of eager tensors, found at the first eager call: creating a
    tensor at import would start TensorFlow's runtime, after which a
    MultiWorkerMirroredStrategy can no longer be built in the process."""
    return type(tf.constant(0.0))


class SignatureCache(dict):
    """Values per call signature, at most `max_size` of them: beyond, the
    cache starts over (a bound on memory for a caller whose signatures keep
    changing, who then takes the full path, as at a first call)."""

    def __init__(self, max_size):
        super().__init__()
        self.max_size = max_size

    def remember(self, signature, value):
        """Keeps `value` for `signature`, first emptying a full cache."""
        if len(self) >= self.max_size:
            self.clear()
        self[signature] = value
