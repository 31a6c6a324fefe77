"""Pausing the gradient tape: the one private TensorFlow API tf_vtrace uses.

PRIVATE TENSORFLOW API. `tensorflow.python.eager.record` is not part of TF's
public API; this is the only module of tf_vtrace that imports from
`tensorflow.python` (tests/test_tape.py fails loudly if the symbols move).
No public API replaces it: `tf.stop_gradient` and `tf.custom_gradient` still
let an eager tape record the ops inside (and XLA cannot hand a compiled
scan's intermediates to a backward pass), so the V-trace kernel and the fused
loss call run with the tape paused.

If a TensorFlow release moves the symbols, the fallback keeps every result
right at some cost: `may_record()` says True (the fused loss then always
computes its gradient) and `call_unrecorded` records the call and stops the
gradient at its outputs.
"""

import contextlib

import tensorflow as tf

try:
    from tensorflow.python.eager import record as _record  # PRIVATE TF API (see above)
    PAUSES = callable(getattr(_record, "stop_recording", None)) and callable(
        getattr(_record, "could_possibly_record", None))
except ImportError:  # pragma: no cover - only on a TensorFlow that moved it
    _record = None
    PAUSES = False

__all__ = ["PAUSES", "may_record", "call_unrecorded", "in_xla_context"]


def may_record():
    """Whether a gradient tape may record ops here (True when unsure)."""
    return _record.could_possibly_record() if PAUSES else True


def _paused():
    return _record.stop_recording() if PAUSES else contextlib.nullcontext()


def call_unrecorded(fn, *args):
    """`fn(*args)`, with no tape recording the call.

    With the private API the tape is paused around the call; without it the
    outputs are cut from the gradient instead (`tf.stop_gradient`).
    """
    with _paused():
        outputs = fn(*args)
    if not PAUSES:
        outputs = tf.nest.map_structure(tf.stop_gradient, outputs)
    return outputs


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
