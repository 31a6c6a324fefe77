"""A diagonal Gaussian policy head for the agent's Keras 3 networks.

`GaussianHead(D)` maps the policy tower's features [N, F] to the policy
output [N, 2·D] of `tf_vtrace.agent.policies.DiagonalGaussian`: per action
dimension the mean (a dense layer, orthogonal init with a small gain so the
first policy's means are near 0) and the log-std, by default one learned
vector [D] shared by every state (PPO's and CleanRL's continuous policies),
or with ``state_dependent_std=True`` a second dense layer of the features.

`gaussian_head_numpy` is the same computation in NumPy, from the layer's
weights, for the actor's NumPy inference path.
"""

import keras
import numpy as np

from tf_vtrace import distributions

__all__ = ["GaussianHead", "gaussian_head_numpy"]


@keras.saving.register_keras_serializable(package="tf_vtrace")
class GaussianHead(keras.layers.Layer):
    """Features [N, F] → (mean, log-std) pairs [N, 2·D].

    Args:
      action_dim: D.
      state_dependent_std: The log-std is a dense layer of the features
        (else one learned vector).
      initial_log_std: The initial log-std (the vector's value, or the dense
        layer's bias).
      mean_gain: The orthogonal initializer's gain of the mean layer.
      **kwargs: Layer arguments (``name``, ``dtype``).

    Its weights' paths below the layer's name (`keras.Variable.path` is
    ``"<name>/mean/kernel"``, ...): ``mean/kernel`` [F, D], ``mean/bias``
    [D], and ``log_std`` [D] (state-independent) or ``log_std/kernel``
    [F, D] and ``log_std/bias`` [D]. (Keras lists the layer's own
    ``log_std`` before its sublayers' weights.)
    """

    def __init__(self, action_dim, state_dependent_std=False, initial_log_std=0.0,
                 mean_gain=0.01, **kwargs):
        super().__init__(**kwargs)
        self.action_dim = int(action_dim)
        if self.action_dim < 1:
            raise ValueError(f"`action_dim` must be a positive int, got {action_dim!r}.")
        self.state_dependent_std = bool(state_dependent_std)
        self.initial_log_std = float(initial_log_std)
        self.mean_gain = float(mean_gain)
        self.mean = keras.layers.Dense(
            self.action_dim, name="mean",
            kernel_initializer=keras.initializers.Orthogonal(self.mean_gain))
        self.log_std_layer = keras.layers.Dense(
            self.action_dim, name="log_std", kernel_initializer=keras.initializers.Orthogonal(
                self.mean_gain),
            bias_initializer=keras.initializers.Constant(self.initial_log_std)
        ) if self.state_dependent_std else None

    def build(self, input_shape):
        self.mean.build(input_shape)
        if self.log_std_layer is not None:
            self.log_std_layer.build(input_shape)
        else:
            self.log_std = self.add_weight(
                name="log_std", shape=(self.action_dim,),
                initializer=keras.initializers.Constant(self.initial_log_std))

    def call(self, features):
        log_std = (self.log_std_layer(features) if self.log_std_layer is not None
                   else self.log_std)
        return distributions.gaussian_params(self.mean(features), log_std)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (2 * self.action_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(action_dim=self.action_dim,
                      state_dependent_std=self.state_dependent_std,
                      initial_log_std=self.initial_log_std,
                      mean_gain=self.mean_gain)
        return config


def gaussian_head_numpy(features, weights):
    """`GaussianHead` in NumPy, float32.

    Args:
      features: [N, F].
      weights: A dict from the weights' paths below the layer (``mean/kernel``,
        ``mean/bias``, ``log_std`` or ``log_std/kernel`` and ``log_std/bias``;
        see the class) to arrays.

    Returns:
      [N, 2·D], the layout of `tf_vtrace.distributions`.
    """
    w = {key: np.asarray(value, np.float32) for key, value in weights.items()}
    features = np.asarray(features, np.float32)
    mean = features @ w["mean/kernel"] + w["mean/bias"]
    log_std = (np.broadcast_to(w["log_std"], mean.shape) if "log_std" in w
               else features @ w["log_std/kernel"] + w["log_std/bias"])
    return np.stack([mean, log_std], -1).reshape(len(mean), -1)
