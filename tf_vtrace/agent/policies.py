r"""Action distributions from a network's policy output, for actor and learner.

One object per action space says what the network's policy output (its
"logits", [..., P]) means, so that the actor that samples and the learner
that computes log π, H and KL read it the same way:

* `CategoricalHeads` — `Discrete(n)` (one head) and 1-D `MultiDiscrete(nvec)`
  (one head per entry): the output is the heads' logits concatenated,
  P = Σ_h A_h; an action is [..., H] int32, one index per head, and
  log π(a) = Σ_h log softmax(logits_h)[a_h];
* `DiagonalGaussian` — `Box(low, high, (D,))`: the output is D (mean,
  log-std) pairs, P = 2·D, in the layout of `tf_vtrace.distributions`
  (the network's `_gaussian_head.GaussianHead` writes it, with a learned
  state-independent log-std by default); an action is [..., D] float32,

      log π(a) = Σ_d −½ ((a_d − m_d) / σ_d)² − log σ_d − ½ log 2π.

  The Gaussian is not squashed (a tanh would make log π infinite at the
  bounds, pytorch/rl #2199): the agent keeps the sampled action for the
  loss and clips only the copy it hands to the environment (`to_env`),
  as the reference PPOs do. Greedy is the mean.

The importance ratio ρ = π(a) / μ(a) is the joint one, a product over heads
or dimensions: see `tf_vtrace.distributions` for what that does to ρ̄.

Each policy has the TensorFlow operations (`log_prob`, `entropy`, `kl`,
`sample`, `greedy`, `loss_heads` for `tf_vtrace.impala.impala_loss`) and
NumPy ones for the actor's NumPy inference path (`sample_numpy`,
`greedy_numpy`, `to_env`). `for_action_space` picks the policy.
"""

import abc

import gymnasium as gym
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tf_vtrace import distributions
from tf_vtrace.export import split_heads

tfd = tfp.distributions

__all__ = ["ActionPolicy", "CategoricalHeads", "DiagonalGaussian",
           "as_policy", "for_action_space"]


class ActionPolicy(abc.ABC):
    """What a network's policy output [..., `param_size`] means.

    Attributes:
      param_size: P, the width of the policy output.
      action_shape: The shape of one action, (H,) or (D,).
      action_dtype: int32 (categorical heads) or float32 (Gaussian).
    """

    param_size: int
    action_shape: tuple
    action_dtype: np.dtype

    @property
    @abc.abstractmethod
    def export_arguments(self):
        """The keyword arguments of `tf_vtrace.export.export_policy` (and
        `policy_module`) that say how to read the policy output."""

    @abc.abstractmethod
    def loss_heads(self, params, actions):
        """`(param_heads, action_heads, dist_class)` as
        `tf_vtrace.impala.impala_loss` takes them (lists per head)."""

    def log_prob(self, params, actions):
        """log π(a), [...]: summed over heads or dimensions."""
        heads, action_heads, dist_class = self.loss_heads(params, actions)
        return tf.add_n([self._head(h, dist_class).log_prob(a)
                         for h, a in zip(heads, action_heads)])

    def entropy(self, params):
        """H(π(·|x)), [...]: summed over heads or dimensions."""
        heads, _, dist_class = self.loss_heads(params, None)
        return tf.add_n([self._head(h, dist_class).entropy() for h in heads])

    def kl(self, behaviour_params, target_params):
        """KL(μ ‖ π), [...], analytic, summed over heads or dimensions."""
        mu, _, dist_class = self.loss_heads(behaviour_params, None)
        pi, _, _ = self.loss_heads(target_params, None)
        return tf.add_n([tfd.kl_divergence(self._head(m, dist_class),
                                           self._head(p, dist_class))
                         for m, p in zip(mu, pi)])

    @staticmethod
    def _head(params, dist_class):
        return tfd.Categorical(logits=params) if dist_class is None else dist_class(
            params)

    @abc.abstractmethod
    def sample(self, params, seed):
        """Actions [..., *action_shape] drawn from π, TensorFlow
        (`seed`: a stateless seed, shape [2] int)."""

    @abc.abstractmethod
    def greedy(self, params):
        """The most likely action (the mean of a Gaussian), TensorFlow."""

    @abc.abstractmethod
    def sample_numpy(self, params, rng):
        """Actions [N, *action_shape] from params [N, P], NumPy (`rng`: a
        `numpy.random.Generator`)."""

    @abc.abstractmethod
    def greedy_numpy(self, params):
        """`greedy` in NumPy."""

    @abc.abstractmethod
    def to_env(self, actions):
        """Actions [N, *action_shape] → what the vector env's `step` takes."""


def _check_width(params, size, name):
    width = getattr(params, "shape", (None,))[-1]
    if width is not None and width != size:
        raise ValueError(f"`{name}` must be [..., {size}] for this action space; "
                         f"got shape {tuple(params.shape)}.")


class CategoricalHeads(ActionPolicy):
    """Independent Categorical heads over concatenated logits.

    Args:
      head_sizes: Actions per head, e.g. (2,) or (2, 3).
      scalar: The env takes one integer (Discrete), not a vector per env.
    """

    def __init__(self, head_sizes, scalar=False):
        self.head_sizes = tuple(int(n) for n in head_sizes)
        if not self.head_sizes or min(self.head_sizes) < 1:
            raise ValueError(f"`head_sizes` must be positive ints, got {head_sizes}.")
        self.scalar = bool(scalar and len(self.head_sizes) == 1)
        self.param_size = sum(self.head_sizes)
        self.action_shape = (len(self.head_sizes),)
        self.action_dtype = np.dtype(np.int32)

    @property
    def export_arguments(self):
        return {"head_sizes": self.head_sizes}

    def loss_heads(self, params, actions):
        _check_width(params, self.param_size, "params")
        action_heads = None if actions is None else tf.unstack(
            tf.convert_to_tensor(actions), len(self.head_sizes), axis=-1)
        return split_heads(params, self.head_sizes), action_heads, None

    def sample(self, params, seed):
        params = tf.convert_to_tensor(params)
        flat = tf.reshape(params, [-1, self.param_size])
        seeds = tf.unstack(tf.random.experimental.stateless_split(
            seed, len(self.head_sizes)))
        actions = tf.stack([
            tf.random.stateless_categorical(h, 1, s, dtype=tf.int32)[:, 0]
            for h, s in zip(split_heads(flat, self.head_sizes), seeds)], -1)
        return tf.reshape(actions, tf.concat(
            [tf.shape(params)[:-1], [len(self.head_sizes)]], 0))

    def greedy(self, params):
        return tf.stack([tf.argmax(h, axis=-1, output_type=tf.int32)
                         for h in split_heads(params, self.head_sizes)], -1)

    def sample_numpy(self, params, rng):
        # Gumbel-max: argmax(logits + G) ~ Categorical(logits), G ~ Gumbel(0, 1).
        gumbel = -np.log(-np.log(rng.uniform(1e-12, 1., np.shape(params))))
        return self.greedy_numpy(np.asarray(params) + gumbel)

    def greedy_numpy(self, params):
        if len(self.head_sizes) == 1:  # (the same, without the split and stack)
            return np.argmax(params, axis=-1).astype(np.int32)[..., None]
        return np.stack([np.argmax(h, axis=-1) for h in
                         split_heads(np.asarray(params), self.head_sizes)],
                        -1).astype(np.int32)

    def to_env(self, actions):
        return actions[:, 0] if self.scalar else actions


class DiagonalGaussian(ActionPolicy):
    """An unsquashed diagonal Gaussian over a `Box` of D dimensions.

    Args:
      low: The space's lower bounds, [D] (or a scalar).
      high: The space's upper bounds, [D] (or a scalar).
      dim: D; default the size of `low`.
    """

    def __init__(self, low, high, dim=None):
        low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        dim = int(low.size if dim is None else dim)
        self.low = np.broadcast_to(low, (dim,)).copy()
        self.high = np.broadcast_to(high, (dim,)).copy()
        if not (self.low < self.high).all():
            raise ValueError(f"`low` must be below `high`, got {low} and {high}.")
        self.param_size = 2 * dim
        self.action_shape = (dim,)
        self.action_dtype = np.dtype(np.float32)

    @property
    def export_arguments(self):
        return {"distribution": "gaussian"}

    def loss_heads(self, params, actions):
        _check_width(params, self.param_size, "params")
        action_heads = None if actions is None else [actions]
        return [params], action_heads, distributions.diagonal_gaussian

    def _mean_std(self, params):
        return params[..., 0::2], params[..., 1::2]

    def sample(self, params, seed):
        mean, log_std = self._mean_std(tf.convert_to_tensor(params))
        noise = tf.random.stateless_normal(tf.shape(mean), seed, dtype=mean.dtype)
        return mean + tf.exp(log_std) * noise

    def greedy(self, params):
        return self._mean_std(tf.convert_to_tensor(params))[0]

    def sample_numpy(self, params, rng):
        mean, log_std = self._mean_std(np.asarray(params, np.float32))
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        return (mean + np.exp(log_std) * noise).astype(np.float32)

    def greedy_numpy(self, params):
        return np.asarray(params, np.float32)[..., 0::2].copy()

    def to_env(self, actions):
        """The actions clipped to [low, high] (the unclipped ones stay for
        the loss)."""
        return np.clip(actions, self.low, self.high)


def as_policy(heads):
    """`heads` as an `ActionPolicy`: a policy is returned as it is; head
    sizes (actions per head, e.g. ``(2,)``) give `CategoricalHeads`."""
    if isinstance(heads, ActionPolicy):
        return heads
    return CategoricalHeads(heads)


def for_action_space(action_space):
    """The `ActionPolicy` of a gymnasium action space.

    Args:
      action_space: `Discrete`, 1-D `MultiDiscrete` or a 1-D `Box` with
        finite bounds.

    Returns:
      A `CategoricalHeads` or a `DiagonalGaussian`.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHeads((int(action_space.n),), scalar=True)
    if isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return CategoricalHeads(tuple(int(n) for n in action_space.nvec))
    if (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
            and np.isfinite(action_space.low).all()
            and np.isfinite(action_space.high).all()):
        return DiagonalGaussian(action_space.low, action_space.high)
    raise ValueError(
        "the action space must be Discrete, 1-D MultiDiscrete or a 1-D Box "
        f"with finite bounds; got {action_space}.")
