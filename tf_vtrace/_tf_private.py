"""The private TensorFlow API tf_vtrace uses, all of it: tape pausing, the
flat call of a concrete function, and the XLA-context test.

PRIVATE TENSORFLOW API. `tensorflow.python` is not part of TF's public API;
this is the only module of tf_vtrace that imports from `tensorflow.python` or
calls a private method of TensorFlow's (tests/test_tf_private.py fails loudly
if the symbols move). Its callers are the core's private modules; the agent
goes through `_dispatch`.

- **Tape pausing** (`tensorflow.python.eager.record`). No public API
  replaces it: `tf.stop_gradient` and `tf.custom_gradient` still let an eager
  tape record the ops inside (and XLA cannot hand a compiled scan's
  intermediates to a backward pass), so the V-trace kernel and the fused loss
  call run with the tape paused.
- **The flat call** (`ConcreteFunction._call_flat`) skips the matching of the
  arguments against the structured signature, about 130 µs of an eager call
  (docs/performance.md).
- **The XLA context** (`control_flow_util`): whether ops built here run inside
  a caller's XLA compilation, where assert ops are dropped.

If a TensorFlow release moves the symbols, the fallbacks keep every result
right at some cost: `may_record()` says True (the fused loss then always
computes its gradient), `PAUSES` and `FLAT_CALLS` are False (`_dispatch` then
records the call and stops the gradient at its outputs, and makes the public
call), and `in_xla_context()` says False.
"""

import contextlib
import inspect

import tensorflow as tf

try:
    from tensorflow.python.eager import record as _record  # PRIVATE TF API (see above)
    PAUSES = callable(getattr(_record, "stop_recording", None)) and callable(
        getattr(_record, "could_possibly_record", None))
except ImportError:  # pragma: no cover - only on a TensorFlow that moved it
    _record = None
    PAUSES = False

__all__ = ["PAUSES", "FLAT_CALLS", "may_record", "paused", "call_flat",
           "in_xla_context"]


def may_record():
    """Whether a gradient tape may record ops here (True when unsure)."""
    return _record.could_possibly_record() if PAUSES else True


def paused():
    """A context in which no tape records (a null context without `PAUSES`)."""
    return _record.stop_recording() if PAUSES else contextlib.nullcontext()


def _takes_flat_inputs():
    """Whether concrete functions have `_call_flat(tensor_inputs, captured_inputs)`."""
    try:
        from tensorflow.python.eager.polymorphic_function import concrete_function  # PRIVATE TF API
    except ImportError:  # pragma: no cover - only on a TensorFlow that moved it
        return False
    call_flat = getattr(concrete_function.ConcreteFunction, "_call_flat", None)
    if not callable(call_flat):  # pragma: no cover - only on a TF that moved it
        return False
    parameters = list(inspect.signature(call_flat).parameters)
    return parameters == ["self", "tensor_inputs", "captured_inputs"]


# The flat call is used only paused or recorded as the public call records it
# (`_dispatch`), so it needs the pausing API as well.
FLAT_CALLS = PAUSES and _takes_flat_inputs()


def call_flat(concrete, tensors):
    """`concrete(*tensors)` for flat tensor inputs (a list, dtypes exact) known
    to match, recorded by the tapes as the public call is. Only where
    `FLAT_CALLS`.

    PRIVATE TF API: `ConcreteFunction._call_flat`, where the public call also
    records the function for its gradient.
    """
    return concrete._call_flat(tensors, concrete.captured_inputs)  # PRIVATE TF API


try:
    from tensorflow.python.ops import control_flow_util as _control_flow  # PRIVATE TF API
    _XLA_CONTEXT = callable(getattr(_control_flow, "GraphOrParentsInXlaContext", None))
except ImportError:  # pragma: no cover - only on a TensorFlow that moved it
    _control_flow = None
    _XLA_CONTEXT = False


def in_xla_context():
    """Whether ops built here run inside an XLA compilation (a caller's
    `tf.function(jit_compile=True)`), where assert ops are dropped.

    PRIVATE TF API (`control_flow_util`); without it, False: the run-time
    checks are then built as asserts, which XLA drops, and the poisoned (NaN)
    outputs remain the signal.
    """
    if not _XLA_CONTEXT or tf.executing_eagerly():
        return False
    return bool(_control_flow.GraphOrParentsInXlaContext(
        tf.compat.v1.get_default_graph()))
