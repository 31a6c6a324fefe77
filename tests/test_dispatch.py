"""Eager dispatch (tf_vtrace/_dispatch.py): one concrete function per call
signature, called flat, and the bounded signature cache."""

import tensorflow as tf

from tf_vtrace import _dispatch


def test_signature_cache_starts_over_beyond_its_size():
    cache = _dispatch.SignatureCache(2)
    cache.remember("a", 1)
    cache.remember("b", 2)
    assert cache == {"a": 1, "b": 2}
    cache.remember("c", 3)  # full: the cache starts over
    assert cache == {"c": 3}
    assert cache.get("a") is None and cache.get(None) is None


def test_concrete_function_is_traced_once_per_signature():
    function = tf.function(lambda x: 2 * x)

    def concrete(x):
        return _dispatch.concrete_function(function, [x], [x])

    first = concrete(tf.ones([3]))
    assert concrete(tf.zeros([3])) is first  # same shape and dtype: kept
    assert concrete(tf.ones([4])) is not first
    assert concrete(tf.ones([3], tf.float64)) is not first
    assert function.experimental_get_tracing_count() == 3
    assert _dispatch.call_concrete(first, [tf.fill([3], 4.0)]).numpy().tolist() == [8.0] * 3


def test_structure_key_names_dicts_and_lists_and_refuses_the_rest():
    t = tf.ones([2])
    assert _dispatch.structure_key(({"x": [t, t], "y": t}, t)) == (
        ("x", 2), ("y", -1), None, -1)
    assert _dispatch.structure_key(({"x": 1.0},)) is None
    assert _dispatch.structure_key(([t],)) is None


def test_call_traced_flat_and_public_agree_and_record_nothing():
    compiled = tf.function(lambda tensors: tensors[0]["x"] * tensors[1])
    x, y = tf.constant([2.0, 3.0]), tf.constant([4.0, 5.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        flat = _dispatch.call_traced(compiled, ({"x": x}, y), exact=True)
        public = _dispatch.call_traced(compiled, ({"x": x}, y), exact=False)
    assert flat.numpy().tolist() == public.numpy().tolist() == [8.0, 15.0]
    assert tape.gradient(flat, x) is None and tape.gradient(public, x) is None
