"""The learner step's host side: its flat inputs and its one output vector.

The compiled step returns all the loop needs from a call as one float32
vector, one copy to the host (each call or copy costs the learner thread a
wait for the interpreter lock the actor threads hold):

    [diagnostics₁, version before₁, …, diagnosticsₙ, version beforeₙ,
     version after, weights]

one block per update slot (``Config.updates_per_call`` of them, zeros past
the call's count), the versions int64 bit-cast to two float32 each
(`int64_as_float32`: exact at any count) and the weights flat, in
`keras.Model.weights` order. `StepVector` packs it at trace time and splits
it on the host into numpy views.
"""

import numpy as np
import tensorflow as tf

__all__ = ["PreparedUnroll", "StepVector", "flat_weights", "in_turn",
           "int64_as_float32", "signature", "step_inputs"]


def int64_as_float32(value):
    """`value` (a scalar integer) as int64, bit-cast to two float32: exact
    in a float32 vector at any count (`np.ndarray.view(np.int64)` reads it)."""
    return tf.bitcast(tf.cast(value, tf.int64), tf.float32)


class PreparedUnroll(dict):
    """An unroll with `tensors`: the step's inputs (`Learner.prepare`)."""

    tensors = None


def signature(unroll, keys):
    """The step's input signature (shapes, dtypes) of `unroll`'s `keys`,
    from the numpy arrays: an EagerTensor's `shape` releases the
    interpreter lock, and under load each took ≈40 µs to get it back from an
    actor thread (docs/records/scaling.md)."""
    return tuple((array.shape, array.dtype) for array in
                 (np.asarray(unroll[key]) for key in keys))


def step_inputs(count, tensors, slots):
    """The step's flat inputs: `count` (a tensor), then each of `slots`
    unrolls' `tensors`; the slots past ``len(tensors)`` repeat the first
    (unread)."""
    spare = slots - len(tensors)
    return [count] + [tensor for unroll_tensors in tensors + [tensors[0]] * spare
                      for tensor in unroll_tensors]


def in_turn(update, count, inputs, width, slots):
    """`update`'s blocks of `slots` updates in turn, concatenated: the i-th
    on the i-th `width` of the flat `inputs`, made while i < `count` (zeros
    after). Each reads the weights the one before assigned (the graph's
    automatic control dependencies order them, in the compiled program
    too)."""
    blocks = [update(*inputs[:width])]
    for i in range(1, slots):
        unroll_inputs = inputs[i * width:(i + 1) * width]
        blocks.append(tf.cond(
            i < count,
            lambda unroll_inputs=unroll_inputs: update(*unroll_inputs),
            lambda: tf.zeros_like(blocks[0])))
    return tf.concat(blocks, 0)


def flat_weights(weights):
    """`weights` (variables) as one flat float32 vector."""
    return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1])
                      for v in weights], 0)


class StepVector:
    """The layout of the step's output vector (see the module doc).

    Args:
      weights: The network's `keras.Model.weights`.
    """

    def __init__(self, weights):
        # Where each weight lies in the flat vector, and its shape.
        shapes = [tuple(v.shape) for v in weights]
        ends = np.cumsum([int(np.prod(shape)) for shape in shapes]).tolist()
        self._weight_slices = list(zip([0] + ends[:-1], ends, shapes))
        self.diagnostic_keys = None  # Set when the step is traced.

    def pack(self, diagnostics):
        """The diagnostics as one float32 vector (one copy to the host per
        update instead of one per scalar); their names are kept at trace
        time for `diagnostics`."""
        self.diagnostic_keys = tuple(diagnostics)
        return tf.stack([tf.cast(value, tf.float32)
                         for value in diagnostics.values()])

    @staticmethod
    def version_then_weights(version, weights):
        """The tail of the vector: `version` (`int64_as_float32`), then the
        `weights` (`flat_weights`)."""
        return tf.concat([int64_as_float32(version), flat_weights(weights)], 0)

    def split(self, out, count, slots):
        """`out`, the vector of a call with `count` updates of `slots`, on
        the host: `(blocks, version after, flat weights)`, with one block
        `(packed diagnostics, version before)` per update (numpy views)."""
        size = len(self.diagnostic_keys)
        width = size + 2  # The diagnostics, then the version before.
        blocks = [(out[start:start + size],
                   out[start + size:start + width].view(np.int64).item())
                  for start in range(0, width * count, width)]
        rest = out[width * slots:]
        return blocks, rest[:2].view(np.int64).item(), rest[2:]

    def split_weights(self, flat):
        """The flat weights as `keras.Model.get_weights`' list (views)."""
        return [flat[start:end].reshape(shape)
                for start, end, shape in self._weight_slices]

    def diagnostics(self, packed, version_before, policy_version):
        """The packed diagnostics of one update as a dict of Python floats,
        plus ``policy_lag`` (`version_before` − `policy_version`)."""
        lag = version_before - int(policy_version)
        return dict(zip(self.diagnostic_keys, packed.tolist()),
                    policy_lag=float(lag))
