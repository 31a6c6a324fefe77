"""The recurrent core: an LSTM between the torso and the heads.

The network is one functional `keras.Model` of one time step,
``[observations [N, ...], core_state [N, 2, S]] → [logits, value,
core_state']``, the core state being the LSTM's (h, c) stacked on axis 1.
The actor calls it once per env step; the learner replays an unroll with
`unroll`, step by step from the unroll's ``initial_core_state``, zeroing the
state where an episode starts (the step after terminated | truncated), as
the actor did: the same weights give the actor's logits back.
"""

import math

import keras
import tensorflow as tf

__all__ = ["CORE_STATE_KEY", "core_state_shape", "is_recurrent",
           "lstm_network", "unroll"]

# The unroll key of the core state at the unroll's first step, [B, 2, S].
CORE_STATE_KEY = "initial_core_state"


def lstm_network(observation_shape, head_sizes, hidden_sizes, core_size,
                 dense, outputs, separate_value=False, preprocess=None):
    """Torso (tanh layers of `hidden_sizes`), an LSTM of `core_size` units,
    then the policy and value heads, both on the LSTM's output; with
    `separate_value`, two such pathways side by side, the policy head on
    one and the value head on the other (no weight shared: the value loss
    cannot move the policy's memory).

    Args:
      observation_shape: The shape of one observation.
      head_sizes: Actions per head, or an `ActionPolicy`.
      hidden_sizes: Widths of the torso's layers (of each pathway's).
      core_size: S, the LSTM's units (of each pathway's).
      dense, outputs: The feed-forward networks' layer helpers (one
        initialization for both kinds).
      separate_value: One pathway per head.
      preprocess: None, or a function of the torso's input applied first
        (the running statistics' normalisation).

    Returns:
      A `keras.Model` [observations, core_state] → [logits, value,
      core_state'], the core state [N, 2, P·S] (P = 2 pathways with
      `separate_value`, else 1; each pathway's units side by side).
    """
    pathways = ("policy", "value") if separate_value else ("",)
    observations = keras.Input(observation_shape, name="observations")
    flat = keras.layers.Flatten()(
        observations if preprocess is None else preprocess(observations))
    features = []
    for pathway in pathways:
        hidden = flat
        for i, width in enumerate(hidden_sizes):
            name = "_".join(filter(None, (pathway, "torso", str(i))))
            hidden = dense(width, math.sqrt(2), "tanh", name=name)(hidden)
        features.append(hidden)
    features = (features[0] if len(features) == 1
                else keras.layers.Concatenate(name="torso_features")(features))
    torso = keras.Model(observations, features, name="torso")
    core_output = keras.Input((len(pathways) * core_size,), name="core_output")
    policy_output, value_output = (
        (core_output, core_output) if len(pathways) == 1
        else (core_output[:, :core_size], core_output[:, core_size:]))
    heads = keras.Model(core_output, outputs(policy_output, value_output,
                                             head_sizes), name="heads")
    # The one-step model of the actor and the export, built of the three
    # parts that `unroll` applies to whole unrolls (torso, heads) or step by
    # step (the cell).
    observations = keras.Input(observation_shape, name="observations")
    state = keras.Input((2, len(pathways) * core_size), name="core_state")
    output, new_state = _Core(core_size, len(pathways), name="core")(
        torso(observations), state)
    logits, value = heads(output)
    return keras.Model([observations, state], [logits, value, new_state],
                       name="lstm")


class _Core(keras.layers.Layer):
    """`pathways` independent LSTM cells (Keras' `LSTMCell` equations and
    initializers: i, f, g, o gates, forget-gate bias 1) on a state stacked
    as [N, 2, P·S] (h, c; each cell's S units side by side), each cell on
    its own equal share of the input features.

    Split in two so that the learner projects the inputs of a whole unroll
    at once (`project`) and only the recurrent part steps (`step`); the
    actor's one-step call is the same two functions."""

    def __init__(self, units, pathways=1, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.pathways = pathways

    def build(self, features_shape, state_shape=None):
        S, P = self.units, self.pathways
        suffixes = [""] if P == 1 else [f"_{p}" for p in range(P)]
        self.kernels, self.recurrent_kernels, self.biases = [], [], []
        for suffix in suffixes:
            self.kernels.append(self.add_weight(
                (features_shape[-1] // P, 4 * S), "glorot_uniform",
                name="kernel" + suffix))
            self.recurrent_kernels.append(self.add_weight(
                (S, 4 * S), "orthogonal", name="recurrent_kernel" + suffix))
            self.biases.append(self.add_weight(
                (4 * S,), keras.initializers.Constant(
                    [0.] * S + [1.] * S + [0.] * (2 * S)),
                name="bias" + suffix))

    def project(self, features):
        """x W + b per pathway, [..., P·4S]."""
        shares = tf.split(features, self.pathways, axis=-1)
        return tf.concat([tf.matmul(x, w) + b for x, w, b in
                          zip(shares, self.kernels, self.biases)], -1)

    def step(self, projected, state):
        """(h', (h', c') stacked) from the projected input and (h, c)."""
        P = self.pathways
        hs, cs = [], []
        for z, h, c, u in zip(tf.split(projected, P, axis=-1),
                              tf.split(state[:, 0], P, axis=-1),
                              tf.split(state[:, 1], P, axis=-1),
                              self.recurrent_kernels):
            i, f, g, o = tf.split(z + tf.matmul(h, u), 4, axis=-1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            hs.append(tf.sigmoid(o) * tf.tanh(c))
            cs.append(c)
        h, c = (x[0] if P == 1 else tf.concat(x, -1) for x in (hs, cs))
        return h, tf.stack([h, c], axis=1)

    def call(self, features, state):
        return self.step(self.project(features), state)

    def compute_output_shape(self, features_shape, state_shape):
        return (features_shape[0], self.pathways * self.units), state_shape


def is_recurrent(model):
    """Whether `model` takes a core state (a list of two inputs)."""
    return isinstance(model.input, (list, tuple)) and len(model.input) == 2


def core_state_shape(model):
    """(2, S): one env's core state."""
    return tuple(int(d) for d in model.input[1].shape[1:])


def _merge_time_and_batch(x):
    """[T, B, ...] → [T·B, ...]."""
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))


def reset(state, episode_start):
    """The state with the envs where `episode_start` ([B] bool) zeroed."""
    keep = tf.cast(tf.logical_not(episode_start), state.dtype)
    return state * keep[:, None, None]


def unroll(model, observations, done, initial_state, final_observations=None,
           truncated=None, training=True):
    """The model over T + 1 time steps of B envs, as the actor ran it.

    Step 0 starts from `initial_state`; step t > 0 from step t − 1's state,
    zeroed for the envs whose episode ended at t − 1 (`done`, [T, B] bool:
    terminated | truncated).

    Args:
      model: An `lstm_network`.
      observations: [T + 1, B, ...].
      done: [T, B] bool.
      initial_state: [B, 2, S].
      final_observations: [T, B, ...] or None; with `truncated` ([T, B]
        bool): also V of the final observations, each from the state after
        its step (before the reset), computed only if any step truncated.
      training: Passed to the model.

    Returns:
      `(logits [T + 1, B, ΣA], values [T + 1, B], truncation_values [T, B]
      or None)`.
    """
    observations, done, state = (tf.convert_to_tensor(x) for x in
                                 (observations, done, initial_state))
    T = done.shape[0]
    torso, core, heads = (model.get_layer(name)
                          for name in ("torso", "core", "heads"))
    # The torso, the core's input projection and the heads see every step
    # at once; only the recurrent part steps.
    projected = tf.reshape(
        core.project(torso(_merge_time_and_batch(observations),
                           training=training)),
        tf.concat([tf.shape(observations)[:2], [-1]], 0))
    # Unstacked once: the gradient of T + 1 slices `projected[t]` would pad
    # each to the whole unroll and add them up (O(T²), 0.3 ms of the step at
    # the demo's sizes); unstack's gradient is one stack.
    projected_steps = tf.unstack(projected, num=T + 1)
    outputs, states_after = [], []
    for t in range(T + 1):
        if t > 0:
            state = reset(state, done[t - 1])
        output, state = core.step(projected_steps[t], state)
        outputs.append(output)
        states_after.append(state)
    logits, values = heads(_merge_time_and_batch(tf.stack(outputs)),
                           training=training)
    shape = tf.shape(done) + tf.constant([1, 0])  # [T + 1, B]
    logits = tf.reshape(logits, tf.concat([shape, [-1]], 0))
    values = tf.reshape(values, shape)
    truncation_values = None
    if final_observations is not None:
        def final_values():
            _, v, _ = model([_merge_time_and_batch(final_observations),
                             _merge_time_and_batch(tf.stack(states_after[:T]))],
                            training=training)
            return tf.stop_gradient(tf.reshape(v, tf.shape(done)))
        truncation_values = tf.cond(
            tf.reduce_any(truncated), final_values,
            lambda: tf.zeros(tf.shape(done), values.dtype))
    return logits, values, truncation_values
