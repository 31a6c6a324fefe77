"""The private TensorFlow API tf_vtrace uses (tf_vtrace/_tf_private.py), and
the fallbacks of the calls built on it (tf_vtrace/_dispatch.py).

If a TensorFlow upgrade moves `tensorflow.python.eager.record` or
`ConcreteFunction._call_flat`, the library still computes the right numbers
(the fallback), but slower: this test is the loud signal to update
`_tf_private.py`.
"""

import pytest
import tensorflow as tf

from tf_vtrace import _dispatch, _tf_private


def test_private_tape_api_is_found():
    assert _tf_private.PAUSES, (
        "tensorflow.python.eager.record.stop_recording / could_possibly_record "
        "moved in this TensorFlow: update tf_vtrace/_tf_private.py (the fallback runs "
        "the kernels recorded, with stop_gradient on their outputs).")


def test_call_unrecorded_keeps_the_tape_out():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        assert _tf_private.may_record()
        y = _dispatch.call_unrecorded(lambda v: v * v, x)
        z = x * x
    assert float(y) == 9.0
    assert tape.gradient(y, x) is None  # not recorded
    assert float(tape.gradient(z, x)) == 6.0  # the tape itself still records
    assert not _tf_private.may_record()  # no tape open


def test_fallback_cuts_the_gradient(monkeypatch):
    monkeypatch.setattr(_tf_private, "PAUSES", False)
    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        assert _tf_private.may_record()  # unsure: says True
        y = _dispatch.call_unrecorded(lambda v: [v * v, 2 * v], x)
    assert [float(v) for v in y] == [9.0, 6.0]
    assert tape.gradient(y, x) is None


def test_private_flat_call_is_found_and_matches_the_public_call():
    assert _tf_private.FLAT_CALLS, (
        "ConcreteFunction._call_flat(tensor_inputs, captured_inputs) moved in "
        "this TensorFlow: update tf_vtrace/_tf_private.py (eager calls then take the "
        "public, slower call).")
    concrete = tf.function(lambda a, b: [a * b, a + b]).get_concrete_function(
        tf.TensorSpec([None]), tf.TensorSpec([None]))
    x, y = tf.constant([2.0, 3.0]), tf.constant([4.0, 5.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        flat = _dispatch.call_concrete_unrecorded(concrete, [x, y])
    assert [v.numpy().tolist() for v in flat] == [[8.0, 15.0], [6.0, 8.0]]
    assert tape.gradient(flat, x) is None  # not recorded


def test_flat_call_fallback_is_the_public_call(monkeypatch):
    monkeypatch.setattr(_tf_private, "FLAT_CALLS", False)
    concrete = tf.function(lambda a: [a * a]).get_concrete_function(
        tf.TensorSpec([None]))
    x = tf.constant([3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = _dispatch.call_concrete_unrecorded(concrete, [x])
    assert out[0].numpy().tolist() == [9.0]
    assert tape.gradient(out, x) is None


@pytest.mark.parametrize("flat_calls", [True, False])
def test_recorded_flat_call_keeps_the_gradient(monkeypatch, flat_calls):
    """`call_concrete`, flat or (fallback) public, is recorded like the
    public call: d(a·b)/da = b."""
    monkeypatch.setattr(_tf_private, "FLAT_CALLS", flat_calls and _tf_private.FLAT_CALLS)
    concrete = tf.function(lambda a, b: [a * b]).get_concrete_function(
        tf.TensorSpec([None]), tf.TensorSpec([None]))
    x, y = tf.constant([2.0, 3.0]), tf.constant([4.0, 5.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = _dispatch.call_concrete(concrete, [x, y])
    assert out[0].numpy().tolist() == [8.0, 15.0]
    assert tape.gradient(out, x).numpy().tolist() == [4.0, 5.0]
