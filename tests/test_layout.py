"""make_time_major: RLlib's flat [B·T, ...] rows as time-major [T, B, ...]."""
import numpy as np
import pytest
import tensorflow as tf
from vtrace_reference import vtrace_reference

import tf_vtrace

B, T = 3, 5


def flat_rows(*trailing, seed=0):
    """[B·T, ...] rows with distinct values, and their [B, T, ...] meaning."""
    rng = np.random.default_rng(seed)
    batch_major = rng.normal(size=(B, T) + trailing)
    return batch_major.reshape((B * T,) + trailing), batch_major


@pytest.mark.parametrize("trailing", [(), (2,), (2, 4)])
def test_fixed_trajectory_length(trailing):
    flat, batch_major = flat_rows(*trailing)
    out = tf_vtrace.make_time_major(tf.constant(flat), trajectory_len=T)
    assert out.shape == (T, B) + trailing
    np.testing.assert_array_equal(out.numpy(), np.swapaxes(batch_major, 0, 1))
    # Row b·T + t is element [t, b].
    np.testing.assert_array_equal(out.numpy()[2, 1], flat[1 * T + 2])


def test_recurrent_sequence_lengths_give_batch_size():
    flat, batch_major = flat_rows(2)
    seq_lens = tf.constant([5, 2, 4])
    out = tf_vtrace.make_time_major(tf.constant(flat), recurrent_seq_len=seq_lens)
    np.testing.assert_array_equal(out.numpy(), np.swapaxes(batch_major, 0, 1))
    mask = tf_vtrace.make_time_major(
        tf.reshape(tf.sequence_mask(seq_lens, T), [-1]), recurrent_seq_len=seq_lens)
    np.testing.assert_array_equal(mask.numpy().sum(axis=0), [5, 2, 4])


def test_drop_last_and_structures():
    flat, batch_major = flat_rows()
    out = tf_vtrace.make_time_major([flat, {"x": flat}], trajectory_len=T,
                                    drop_last=True)
    expected = np.swapaxes(batch_major, 0, 1)[:-1]
    np.testing.assert_array_equal(out[0].numpy(), expected)
    np.testing.assert_array_equal(out[1]["x"].numpy(), expected)


def test_unknown_row_count_inside_tf_function():
    flat, batch_major = flat_rows(2)

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float64)])
    def reshape(rows):
        return tf_vtrace.make_time_major(rows, trajectory_len=T,
                                         validate_args=True)

    np.testing.assert_array_equal(reshape(flat).numpy(),
                                  np.swapaxes(batch_major, 0, 1))
    with pytest.raises(tf.errors.InvalidArgumentError, match="whole trajectories"):
        reshape(flat[:-1])


def test_feeds_vtrace_like_the_reshaped_arrays():
    """An RLlib-style flat batch through make_time_major into V-trace equals
    the reference on the same data reshaped by hand."""
    rng = np.random.default_rng(1)
    flat = dict(log_rhos=rng.uniform(-2, 2, B * T), rewards=rng.normal(size=B * T),
                values=rng.normal(size=B * T),
                discounts=0.9 * (rng.uniform(size=B * T) > 0.2))
    time_major = {k: tf_vtrace.make_time_major(tf.constant(v), trajectory_len=T)
                  for k, v in flat.items()}
    bootstrap = rng.normal(size=B)
    out = tf_vtrace.from_importance_weights(**time_major, bootstrap_value=bootstrap,
                                            clip_rho_threshold=2.0)
    by_hand = {k: v.reshape(B, T).T for k, v in flat.items()}
    vs, _ = vtrace_reference(**by_hand, bootstrap_value=bootstrap,
                             clip_rho_threshold=2.0)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(), "exactly one of"),
    (dict(trajectory_len=5, recurrent_seq_len=[5, 5, 5]), "exactly one of"),
    (dict(trajectory_len=4), "not a multiple of `trajectory_len`=4"),
    (dict(trajectory_len=0), "`trajectory_len` must be a positive int"),
    (dict(trajectory_len=2.5), "`trajectory_len` must be a positive int"),
    (dict(recurrent_seq_len=5), "`recurrent_seq_len` must be the sequence"),
])
def test_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tf_vtrace.make_time_major(tf.zeros([B * T]), **kwargs)


def test_scalar_is_rejected():
    with pytest.raises(ValueError, match="`tensor` must have a leading axis"):
        tf_vtrace.make_time_major(tf.zeros([]), trajectory_len=T)
