"""Layout helpers: flat sample batches as the time-major tensors V-trace takes.

Not math: RLlib (and other libraries that store experience as a flat batch of
rows) keep B trajectories of T steps one after the other, [B·T, ...]. Its
learners reshape them with a `make_time_major` helper before calling V-trace;
`tf_vtrace.make_time_major` takes the same keywords, so that code ports by
changing the import.
"""

import tensorflow as tf

from tf_vtrace import _checks

__all__ = ["make_time_major"]


def _time_major(tensor, trajectory_len, recurrent_seq_len, drop_last,
                validate_args):
    """One tensor [B·T, ...] as [T, B, ...]; see `make_time_major`."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError(
            "`tensor` must have a leading axis of B·T rows (B trajectories of T "
            "steps one after the other); got a scalar.")
    rows = tf.shape(tensor)[0]
    if recurrent_seq_len is None:
        num_steps = trajectory_len
        static_rows = tensor.shape[0]
        if static_rows is not None and static_rows % num_steps:
            raise ValueError(
                f"`tensor` has {static_rows} rows, not a multiple of "
                f"`trajectory_len`={num_steps}: the rows must be whole "
                "trajectories of T steps.")
        batch_size = rows // num_steps
    else:
        batch_size = tf.shape(recurrent_seq_len)[0]
        num_steps = rows // batch_size
    if validate_args:
        divisor = num_steps if recurrent_seq_len is None else batch_size
        (tensor,) = _checks.with_dependencies([tf.debugging.assert_equal(
            rows % divisor, 0,
            message="`tensor` must hold whole trajectories (rows = B·T)")],
            [tensor])
    batch_major = tf.reshape(
        tensor, tf.concat([[batch_size, num_steps], tf.shape(tensor)[1:]], 0))
    perm = [1, 0] + list(range(2, tensor.shape.rank + 1))
    time_major = tf.transpose(batch_major, perm)
    return time_major[:-1] if drop_last else time_major


def make_time_major(tensor, *, trajectory_len=None, recurrent_seq_len=None,
                    drop_last=False, validate_args=False, name=None):
    r"""Flat rows [B·T, ...], trajectory after trajectory, as [T, B, ...].

    RLlib's learners keep a sample batch as B trajectories of T steps one
    after the other and call `make_time_major(tensor, trajectory_len=...,
    recurrent_seq_len=..., drop_last=...)` before V-trace; this is that helper
    in TensorFlow. Row b·T + t becomes element [t, b].

    Give exactly one of `trajectory_len` (T, RLlib's rollout fragment length:
    B = rows / T) and `recurrent_seq_len` (the sequence lengths of a
    recurrent batch, RLlib's `seq_lens`: B is their number and T = rows / B,
    the padded length). Steps past a sequence's length are padding: pass
    them to the loss as its `mask`, made time-major the same way (see the
    example).

    Args:
      tensor: [B·T, ...] rows, or a list, tuple or dict of such tensors
        (each is reshaped; the structure is kept).
      trajectory_len: T, a positive Python int; or None with
        `recurrent_seq_len`.
      recurrent_seq_len: The per-sequence lengths [B] (their number gives B);
        or None with `trajectory_len`.
      drop_last: Drop the last time step (RLlib's `vtrace_drop_last_ts`),
        giving [T − 1, B, ...].
      validate_args: Assert at run time that the rows are whole
        trajectories (a static row count is always checked).
      name: Name scope of the ops.

    Returns:
      The time-major tensor [T, B, ...] (or [T − 1, B, ...]), or the same
      structure of them.

    Raises:
      ValueError: Neither or both of `trajectory_len` and `recurrent_seq_len`
        are given, `trajectory_len` is not a positive int, a tensor is a
        scalar, or a known row count is not a multiple of T.

    Examples:
      >>> import tensorflow as tf, tf_vtrace
      >>> flat = tf.constant([10, 11, 12, 20, 21, 22])  # B=2 trajectories, T=3
      >>> tf_vtrace.make_time_major(flat, trajectory_len=3).numpy().tolist()
      [[10, 20], [11, 21], [12, 22]]
      >>> seq_lens = tf.constant([3, 2])  # recurrent: the second is padded
      >>> mask = tf.reshape(tf.sequence_mask(seq_lens, 3), [-1])
      >>> tf_vtrace.make_time_major(mask, recurrent_seq_len=seq_lens).numpy().tolist()
      [[True, True], [True, True], [True, False]]
    """
    if (trajectory_len is None) == (recurrent_seq_len is None):
        raise ValueError(
            "Pass exactly one of `trajectory_len` (T of a non-recurrent batch) "
            "and `recurrent_seq_len` (the sequence lengths of a recurrent "
            f"batch); got trajectory_len={trajectory_len!r} and "
            f"recurrent_seq_len={recurrent_seq_len!r}.")
    if trajectory_len is not None and (
            isinstance(trajectory_len, bool)
            or not isinstance(trajectory_len, int) or trajectory_len < 1):
        raise ValueError(
            f"`trajectory_len` must be a positive int, got {trajectory_len!r}.")
    with tf.name_scope(name or "make_time_major"):
        if recurrent_seq_len is not None:
            recurrent_seq_len = tf.convert_to_tensor(recurrent_seq_len)
            if recurrent_seq_len.shape.rank != 1:
                raise ValueError(
                    "`recurrent_seq_len` must be the sequence lengths, rank 1 "
                    f"[B]; got shape {recurrent_seq_len.shape}.")
        return tf.nest.map_structure(
            lambda t: _time_major(t, trajectory_len, recurrent_seq_len,
                                  drop_last, validate_args), tensor)
