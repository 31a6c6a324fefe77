"""Keras 3 policy/value networks: observations → (logits, value).

Every network maps a batch of observations [N, ...] to two outputs: the
policy's parameters, [N, P], and the value V(x), [N]. The parameters are
what the action space's `tf_vtrace.agent.policies.ActionPolicy` reads: the
logits of all action heads concatenated, [N, Σ_h A_h] (split with
`split_heads`), or for a `Box` the (mean, log-std) pairs of a diagonal
Gaussian, [N, 2·D] (`_gaussian_head.GaussianHead`: the log-std one learned
vector, or with ``state_dependent_std`` a dense layer of the features). The
`heads` argument of the builders is either head sizes (Categorical heads) or
an `ActionPolicy`.

With ``running_statistics`` the network starts with a
`_running_statistics.RunningStatistics` layer: observation normalisation
(and the reward scale's statistics) as non-trainable weights.

* `mlp`: for vector observations, separate policy and value towers of tanh
  layers (orthogonal init, a small last policy layer so the first policy is
  near uniform), as in CleanRL's PPO for classic control.
* `nature_cnn`: for stacked Atari frames [N, 4, 84, 84] uint8, the DQN /
  IMPALA "shallow" convolutional trunk (Mnih et al. 2015) shared by both heads.
* `grid_cnn`: for small channels-last grids [N, 10, 10, C] of 0/1 (MinAtar),
  the MinAtar baselines' trunk (Young & Tian 2019): one 3×3 convolution of 16
  filters and a dense layer of 128, ReLU, shared by both heads.
"""

import math

import keras
import numpy as np

from tf_vtrace.agent import _recurrent, _running_statistics, policies
from tf_vtrace.agent._gaussian_head import GaussianHead, gaussian_head_numpy
from tf_vtrace.export import split_heads

__all__ = ["build_network", "config_statistics", "for_config", "grid_cnn",
           "lstm", "mlp", "nature_cnn", "split_heads"]


def _dense(units, gain, activation=None, name=None):
    return keras.layers.Dense(
        units, activation=activation, name=name,
        kernel_initializer=keras.initializers.Orthogonal(gain),
        bias_initializer="zeros")


# The Gaussian head's layer name (`MLPForward` reads its weights by it).
GAUSSIAN_HEAD = "gaussian_head"


def _outputs(policy_features, value_features, heads, state_dependent_std=False):
    """(policy parameters, value) on the two towers' features."""
    policy = policies.as_policy(heads)
    if isinstance(policy, policies.DiagonalGaussian):
        params = GaussianHead(policy.action_shape[0], state_dependent_std,
                              name=GAUSSIAN_HEAD)(policy_features)
    else:
        params = _dense(policy.param_size, 0.01, name="logits")(policy_features)
    value = _dense(1, 1.0, name="value")(value_features)
    value = keras.layers.Reshape((), name="value_squeezed")(value)
    return params, value


def _seeded_input(observation_shape, seed):
    """The model's input, after seeding the initializers (if `seed`)."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    return keras.Input(observation_shape, name="observations")


def _statistics(observations, running_statistics):
    """`observations` through a `RunningStatistics` layer: ``"normalize"``
    (normalising), ``"hold"`` (holding the return statistics only) or None
    (no layer)."""
    if running_statistics is None:
        return observations
    return _running_statistics.RunningStatistics(
        normalize_observations=running_statistics == "normalize")(observations)


def _conv(filters, kernel, stride, name=None):
    return keras.layers.Conv2D(
        filters, kernel, stride, activation="relu", name=name,
        kernel_initializer=keras.initializers.Orthogonal(math.sqrt(2)))


def _shared_torso_model(observations, features, width, head_sizes, name):
    """Flatten, one dense ReLU layer of `width` ("torso"), both heads on it."""
    hidden = keras.layers.Flatten()(features)
    hidden = _dense(width, math.sqrt(2), "relu", name="torso")(hidden)
    return keras.Model(observations, _outputs(hidden, hidden, head_sizes),
                       name=name)


def mlp(observation_shape, head_sizes, hidden_sizes=(64, 64), seed=None,
        state_dependent_std=False, running_statistics=None):
    """Separate tanh towers for the policy and the value.

    Args:
      observation_shape: The shape of one observation (vector).
      head_sizes: Actions per head, or an `ActionPolicy` (module doc).
      hidden_sizes: Widths of each tower's hidden layers.
      seed: Seeds the initializers (via `keras.utils.set_random_seed`).
      state_dependent_std: A Gaussian's log-std is a dense layer of the
        policy tower (else one learned vector).
      running_statistics: None, ``"normalize"`` or ``"hold"`` (see
        `build_network`).

    Returns:
      A `keras.Model` observations → [policy parameters, value].
    """
    observations = _seeded_input(observation_shape, seed)
    flat = keras.layers.Flatten()(_statistics(observations, running_statistics))
    towers = []
    for tower in ("policy", "value"):
        hidden = flat
        for i, width in enumerate(hidden_sizes):
            hidden = _dense(width, math.sqrt(2), "tanh",
                            name=f"{tower}_{i}")(hidden)
        towers.append(hidden)
    return keras.Model(observations, _outputs(*towers, head_sizes,
                                              state_dependent_std),
                       name="mlp")


class MLPForward:
    """`mlp`'s forward pass in NumPy, for the actor's one-step calls.

    The same layers (the running statistics' normalisation, tanh towers,
    linear logits or the Gaussian head, linear value), read from the
    weights in `keras.Model.get_weights()` order, in float32. A 64-unit
    MLP on a few observations is ~30 µs of NumPy against ~250 µs for a
    TensorFlow function call on the 2-core machine of docs/records/scaling.md,
    where the call's own overhead (~150 µs for a trivial function) is most
    of it.

    Args:
      model: An `mlp` network (its layer names say which weights are which).
    """

    def __init__(self, model):
        self._paths = [v.path for v in model.weights]
        self._params = None  # layer name → {path below the layer: array}
        statistics = _running_statistics.find(model)
        self._normalize = (statistics is not None
                           and statistics.normalize_observations)

    @staticmethod
    def is_mlp(model):
        """Whether `model` was built by `mlp`."""
        return model.name == "mlp"

    def set_weights(self, weights):
        """Takes `keras.Model.get_weights()`-ordered arrays."""
        params = {}
        for path, array in zip(self._paths, weights):
            layer, below = path.split("/", 1)
            params.setdefault(layer, {})[below] = np.asarray(array, np.float32)
        self._params = params

    def _dense(self, x, layer):
        return x @ self._params[layer]["kernel"] + self._params[layer]["bias"]

    def _tower(self, x, tower):
        i = 0
        while f"{tower}_{i}" in self._params:
            x = np.tanh(self._dense(x, f"{tower}_{i}"))
            i += 1
        return x

    def _policy(self, flat):
        features = self._tower(flat, "policy")
        if GAUSSIAN_HEAD in self._params:
            return gaussian_head_numpy(features, self._params[GAUSSIAN_HEAD])
        return self._dense(features, "logits")

    def _flat(self, observations):
        flat = np.asarray(observations, np.float32).reshape(len(observations), -1)
        if self._normalize:
            return _running_statistics.normalize_numpy(
                flat, self._params[_running_statistics.LAYER_NAME])
        return flat

    def logits(self, observations):
        """Logits [N, ΣA] of observations [N, ...], float32 (the policy
        tower alone: what acting needs)."""
        return self._policy(self._flat(observations))

    def __call__(self, observations):
        """(logits [N, ΣA], values [N]) of observations [N, ...], float32."""
        flat = self._flat(observations)
        return (self._policy(flat),
                self._dense(self._tower(flat, "value"), "value")[:, 0])


def nature_cnn(observation_shape, head_sizes, seed=None):
    """The Nature DQN trunk on channel-first stacked frames, shared by both heads.

    Args:
      observation_shape: (stack, height, width), uint8 frames.
      head_sizes: Actions per head.
      seed: Seeds the initializers.

    Returns:
      A `keras.Model` observations → [logits, value].
    """
    observations = _seeded_input(observation_shape, seed)
    hidden = keras.layers.Permute((2, 3, 1))(observations)  # channels last
    hidden = keras.layers.Rescaling(1. / 255)(hidden)
    for filters, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
        hidden = _conv(filters, kernel, stride)(hidden)
    return _shared_torso_model(observations, hidden, 512, head_sizes,
                               "nature_cnn")


def grid_cnn(observation_shape, head_sizes, seed=None):
    """MinAtar's trunk on channels-last grids, shared by both heads.

    Args:
      observation_shape: (height, width, channels), values in [0, 1].
      head_sizes: Actions per head.
      seed: Seeds the initializers.

    Returns:
      A `keras.Model` observations → [logits, value].
    """
    observations = _seeded_input(observation_shape, seed)
    hidden = _conv(16, 3, 1, name="conv")(observations)
    return _shared_torso_model(observations, hidden, 128, head_sizes,
                               "grid_cnn")


def lstm(observation_shape, head_sizes, hidden_sizes=(64, 64), core_size=64,
         seed=None, separate_value_core=False, state_dependent_std=False,
         running_statistics=None):
    """A tanh torso, an LSTM core of `core_size` units, the two heads on its
    output (with `separate_value_core`: a torso and LSTM per head); see
    `tf_vtrace.agent._recurrent`. The other arguments as `mlp`'s.

    Returns:
      A `keras.Model` [observations, core_state [N, 2, S]] →
      [logits, value, core_state'].
    """
    _seeded_input(observation_shape, seed)
    def outputs(policy_features, value_features, heads):
        return _outputs(policy_features, value_features, heads,
                        state_dependent_std)

    return _recurrent.lstm_network(
        observation_shape, head_sizes, hidden_sizes, core_size, _dense,
        outputs, separate_value_core,
        lambda x: _statistics(x, running_statistics))


def build_network(observation_space, head_sizes, hidden_sizes=(64, 64),
                  seed=None, core="none", core_size=64,
                  separate_value_core=False, state_dependent_std=False,
                  running_statistics=None):
    """By the observations: `nature_cnn` for uint8 rank-3 ones (stacked
    Atari frames, channels first), `grid_cnn` for other rank-3 ones (MinAtar
    grids, channels last), else `mlp`; with ``core="lstm"`` (vector
    observations): `lstm`.

    Args:
      observation_space: A `gymnasium.spaces.Box`.
      head_sizes: Actions per head.
      hidden_sizes: The MLP's widths.
      seed: Seeds the initializers.
      core: ``"none"`` (feed-forward) or ``"lstm"``.
      core_size: The LSTM's units.
      separate_value_core: With ``core="lstm"``: a torso and an LSTM for
        each head (`Config.separate_value_core`).
      state_dependent_std: A Gaussian head's log-std depends on the state
        (`Config.state_dependent_std`).
      running_statistics: None (no statistics), ``"normalize"`` (normalise
        the observations, hold the return statistics too) or ``"hold"``
        (hold the return statistics only): `config_statistics`. Vector
        observations only.

    Returns:
      A `keras.Model` observations → [logits, value] (recurrent: see `lstm`).
    """
    shape = tuple(observation_space.shape)
    if core == "lstm":
        if len(shape) == 3:
            raise ValueError("core='lstm' takes vector observations, got "
                             f"observations of shape {shape}.")
        return lstm(shape, head_sizes, hidden_sizes, core_size, seed=seed,
                    separate_value_core=separate_value_core,
                    state_dependent_std=state_dependent_std,
                    running_statistics=running_statistics)
    if len(shape) == 3 and running_statistics is not None:
        raise ValueError("observation normalisation and reward scaling take "
                         f"vector observations, got observations of shape {shape}.")
    if len(shape) == 3 and observation_space.dtype == np.uint8:
        return nature_cnn(shape, head_sizes, seed=seed)
    if len(shape) == 3:
        return grid_cnn(shape, head_sizes, seed=seed)
    return mlp(shape, head_sizes, hidden_sizes, seed=seed,
               state_dependent_std=state_dependent_std,
               running_statistics=running_statistics)


def config_statistics(config):
    """`build_network`'s ``running_statistics`` for a `Config`."""
    if config.normalize_observations:
        return "normalize"
    return "hold" if config.scale_rewards else None


def for_config(config, observation_space, heads, seed=None):
    """`build_network` with `config`'s network options (`heads`: head sizes
    or an `ActionPolicy`)."""
    return build_network(
        observation_space, heads, config.hidden_sizes, seed=seed,
        core=config.core, core_size=config.core_size,
        separate_value_core=config.separate_value_core,
        state_dependent_std=config.state_dependent_std,
        running_statistics=config_statistics(config))
