"""The run's running statistics as non-trainable weights of the network.

`RunningStatistics` is the network's first layer when `Config.
normalize_observations` or `Config.scale_rewards` is on. It holds

* the observations' running mean and variance (and count), and normalises
  its input by them when ``normalize_observations``:
  x ↦ clip((x − m) / √(v + 1e-8), −10, 10) (`tf_vtrace.agent.normalization`);
* the running variance (mean, count) of each env's discounted return
  R ← γ R + r, by which the learner scales the rewards,
  r ↦ clip(r / √(v_R + 1e-8), −10, 10), when ``scale_rewards``.

As weights of the network they travel with it: to the actors with every
weight push (all backends act on the statistics of the weights they hold),
into the checkpoint (a resumed run continues them) and into the exported
policy (a reloaded SavedModel normalises as training did). The learner owns
them: before each update it merges the unroll's raw observations and the
actor's discounted returns into them (Chan's parallel update, float64,
`normalization.merge_moments`), then computes the loss on the raw
observations through the network. They are float32 weights, so they go
through the learner's flat weight vector like the others.

`normalize_numpy` is the layer's call in NumPy, for the actor's NumPy MLP.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_vtrace.agent import normalization

__all__ = ["CLIP", "LAYER_NAME", "RETURNS_KEY", "RunningStatistics", "find", "normalize_numpy"]

LAYER_NAME = "running_statistics"
# The unroll key of the actors' discounted returns (`tf_vtrace.agent.actor`).
RETURNS_KEY = "discounted_returns"
CLIP = 10.0  # the normalised observations' and scaled rewards' bound
_OBSERVATION = ("observation_mean", "observation_var", "observation_count")
_RETURN = ("return_mean", "return_var", "return_count")


@keras.saving.register_keras_serializable(package="tf_vtrace")
class RunningStatistics(keras.layers.Layer):
    """Observations [N, ...] → normalised observations (or as they are).

    Args:
      normalize_observations: Normalise the input (else pass it through and
        only hold the return statistics).
      **kwargs: Layer arguments.
    """

    def __init__(self, normalize_observations=True, **kwargs):
        kwargs.setdefault("name", LAYER_NAME)
        super().__init__(**kwargs)
        self.normalize_observations = bool(normalize_observations)

    def build(self, input_shape):
        shape = tuple(input_shape[1:])
        for name, part_shape, init in zip(
                _OBSERVATION + _RETURN, (shape, shape, (), (), (), ()),
                ("zeros", "ones", "zeros", "zeros", "ones", "zeros")):
            setattr(self, name, self.add_weight(
                name=name, shape=part_shape, initializer=init, trainable=False))

    def call(self, observations):
        if not self.normalize_observations:
            return observations
        return normalization.normalize(observations, self.observation_mean,
                                       self.observation_var, CLIP)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return dict(super().get_config(),
                    normalize_observations=self.normalize_observations)

    def _merge(self, names, batch):
        variables = [getattr(self, name) for name in names]
        for variable, value in zip(variables, normalization.merge_moments(
                *variables, batch)):
            variable.assign(tf.cast(value, variable.dtype))

    def update(self, observations, returns):
        """Merges observations [N, ...] and discounted returns [M] (either
        may be None) into the statistics."""
        if observations is not None:
            self._merge(_OBSERVATION, observations)
        if returns is not None:
            self._merge(_RETURN, returns)

    def scale_rewards(self, rewards):
        """Rewards divided by the returns' standard deviation, clipped."""
        return normalization.scale(rewards, self.return_var, CLIP)


def find(model):
    """`model`'s `RunningStatistics` layer (in a nested model too), or None."""
    for layer in model.layers:
        if isinstance(layer, RunningStatistics):
            return layer
        if isinstance(layer, keras.Model):
            found = find(layer)
            if found is not None:
                return found
    return None


def normalize_numpy(observations, weights):
    """The layer's call in NumPy, float32 (`weights`: its weights by name)."""
    mean, var = weights["observation_mean"], weights["observation_var"]
    return np.clip((observations - mean) / np.sqrt(var + normalization.EPSILON),
                   -CLIP, CLIP).astype(np.float32)
