"""The shape conventions that the peers' own test suites rely on, ported.

scalable_agent's `vtrace_test.py` and trfl's `vtrace_ops_test.py` check that
[T, B, 1] importance weights and discounts broadcast against [T, B, K] values,
and that an input of the wrong rank raises a `ValueError` matching
"must have rank". These are their cases in our own words, with TF2 graphs in
place of TF1 placeholders.
"""
import pytest
import tensorflow as tf

import tf_vtrace


def specs(bootstrap_shape):
    return dict(
        log_rhos=tf.TensorSpec([None, None, 1]),
        discounts=tf.TensorSpec([None, None, 1]),
        rewards=tf.TensorSpec([None, None, 42]),
        values=tf.TensorSpec([None, None, 42]),
        bootstrap_value=tf.TensorSpec(bootstrap_shape))


def trace(input_specs):
    """Traces a call on symbolic inputs (TF2's stand-in for placeholders)."""
    function = tf.function(
        lambda inputs: tf_vtrace.from_importance_weights(**inputs).vs)
    return function.get_concrete_function(input_specs).outputs[0]


def test_higher_rank_inputs_broadcast():
    assert trace(specs([None, 42])).shape.as_list()[-1] == 42


def test_inconsistent_rank_raises_must_have_rank():
    with pytest.raises(ValueError, match="must have rank 2"):
        trace(specs([None]))  # Should be [None, 42].


def test_must_have_rank_also_names_the_argument():
    with pytest.raises(ValueError, match="`bootstrap_value` must have rank 2"):
        trace(specs([None]))


@pytest.mark.parametrize("name", ["log_rhos", "discounts", "rewards"])
def test_sequence_of_wrong_rank(name):
    inputs = specs([None, 42])
    inputs[name] = tf.TensorSpec([None, None])
    with pytest.raises(ValueError, match=f"`{name}` must have rank 3"):
        trace(inputs)
