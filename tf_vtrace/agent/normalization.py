r"""Running observation normalisation and reward scaling, kept in variables.

As Stable-Baselines3's `VecNormalize` and CleanRL's `NormalizeObservation` /
`NormalizeReward` (gymnasium's wrappers), with their state in `tf.Variable`s
of a `tf.Module`, so that it is saved with a `tf.train.Checkpoint` (resume)
and with a SavedModel (the exported policy normalises as training did).

* `RunningMeanStd`: mean and variance of a stream of batches, float64,
  merged per batch by Chan et al.'s parallel update (1979): for the stats
  (m_a, v_a, n_a) so far and a batch's (m_b, v_b, n_b), with δ = m_b − m_a
  and n = n_a + n_b,

      m = m_a + δ n_b / n,
      v = (v_a n_a + v_b n_b + δ² n_a n_b / n) / n.

  The count starts at 0, so the first batch sets the statistics exactly
  (SB3 starts it at 1e-4 with mean 0 and variance 1, a prior that biases the
  variance by ≈ 1e-4·m² / n for data far from 0); before any batch the mean
  is 0 and the variance 1.
* `ObservationNormalizer`: x ↦ clip((x − m) / √(v + 1e-8), −c, c), c = 10.
* `RewardScaler`: each env's discounted return R ← γ R + r (reset to 0 after
  the episode ends) feeds a `RunningMeanStd`; rewards are scaled by its
  standard deviation, r ↦ clip(r / √(v_R + 1e-8), −c, c), not centred.

Updating is the actor's (or the training loop's) job; normalising is every
consumer's: the learner sees the observations as the actor normalised them.
"""

import tensorflow as tf

__all__ = ["RunningMeanStd", "ObservationNormalizer", "RewardScaler",
           "merge_moments", "normalize", "scale"]

EPSILON = 1e-8  # added to the variance before its square root


def merge_moments(mean, var, count, batch):
    """(mean, var, count) after merging `batch` [N, *shape] into the
    statistics (mean, var, count) of the samples so far, by Chan's parallel
    update (module doc), in float64.

    An empty batch leaves them as they were; with count 0 the batch's own
    moments are the result.
    """
    mean, var, count = (tf.cast(x, tf.float64) for x in (mean, var, count))
    batch = tf.cast(tf.reshape(batch, tf.concat([[-1], tf.shape(mean)], 0)),
                    tf.float64)
    batch_count = tf.cast(tf.shape(batch)[0], tf.float64)
    # Two passes over the batch; an empty one gives zeros, not NaN.
    batch_mean = tf.math.divide_no_nan(tf.reduce_sum(batch, 0), batch_count)
    batch_var = tf.math.divide_no_nan(
        tf.reduce_sum(tf.square(batch - batch_mean), 0), batch_count)
    delta = batch_mean - mean
    total = count + batch_count
    share = tf.math.divide_no_nan(batch_count, total)  # 0 for no data at all
    m2 = var * count + batch_var * batch_count + tf.square(delta) * count * share
    return (mean + delta * share,
            tf.where(total > 0, tf.math.divide_no_nan(m2, total), var), total)


def normalize(x, mean, var, clip):
    """clip((x − m) / √(v + 1e-8), −clip, clip) (no clip for None), in the
    dtype of `mean`."""
    x = tf.cast(x, mean.dtype)
    normalized = (x - mean) / tf.sqrt(var + EPSILON)
    return normalized if clip is None else tf.clip_by_value(normalized, -clip, clip)


def scale(rewards, var, clip):
    """clip(r / √(v_R + 1e-8), −clip, clip) (no clip for None), in the dtype
    of `var`."""
    scaled = tf.cast(rewards, var.dtype) / tf.sqrt(var + EPSILON)
    return scaled if clip is None else tf.clip_by_value(scaled, -clip, clip)


class RunningMeanStd(tf.Module):
    """The mean and (population) variance of everything `update` has seen.

    Args:
      shape: The shape of one sample.
      name: The module's name.
    """

    def __init__(self, shape=(), name=None):
        super().__init__(name=name)
        self.shape = tuple(int(n) for n in shape)
        with self.name_scope:
            self.mean = tf.Variable(tf.zeros(self.shape, tf.float64),
                                    trainable=False, name="mean")
            self.var = tf.Variable(tf.ones(self.shape, tf.float64),
                                   trainable=False, name="var")
            self.count = tf.Variable(tf.constant(0., tf.float64),
                                     trainable=False, name="count")

    def update(self, batch):
        """Merges a batch [N, *shape] (Chan's parallel update, float64)."""
        mean, var, count = merge_moments(self.mean, self.var, self.count, batch)
        self.mean.assign(mean)
        self.var.assign(var)
        self.count.assign(count)

    def std(self):
        """√(var + 1e-8), float64."""
        return tf.sqrt(self.var + EPSILON)


def _check_clip(clip):
    if clip is not None and not clip > 0:
        raise ValueError(f"`clip` must be a positive number or None, got {clip!r}.")
    return clip


class ObservationNormalizer(tf.Module):
    """Normalises observations by their running mean and standard deviation.

    Args:
      shape: The shape of one observation.
      clip: Clip the normalised observations to [−clip, clip]; None: no clip.
      name: The module's name.

    Examples:
      >>> import numpy as np
      >>> norm = ObservationNormalizer((2,))
      >>> norm.update(np.array([[0., 10.], [2., 30.]]))  # mean [1, 20], std [1, 10]
      >>> norm(np.array([[2., 0.]])).numpy().round(4).tolist()
      [[1.0, -2.0]]
    """

    def __init__(self, shape, clip=10.0, name=None):
        super().__init__(name=name)
        self.clip = _check_clip(clip)
        with self.name_scope:
            self.stats = RunningMeanStd(shape, name="observation_stats")
        self.shape = self.stats.shape

    def update(self, observations):
        """Adds observations [N, *shape] to the statistics."""
        self.stats.update(observations)

    @tf.function
    def normalize(self, observations):
        """(x − m) / √(v + 1e-8), clipped, as float32; a tf.function, so it
        is saved with the module (give it a signature to export it)."""
        return self(observations)

    def __call__(self, observations):
        return tf.cast(normalize(observations, self.stats.mean, self.stats.var,
                                 self.clip), tf.float32)


class RewardScaler(tf.Module):
    """Scales rewards by the running standard deviation of the discounted
    return of each env (SB3's `VecNormalize(norm_reward=True)`).

    Args:
      num_envs: The number of envs whose rewards arrive together.
      discount: γ of the discounted return.
      clip: Clip the scaled rewards to [−clip, clip]; None: no clip.
      name: The module's name.
    """

    def __init__(self, num_envs, discount=0.99, clip=10.0, name=None):
        super().__init__(name=name)
        if not 0 <= discount <= 1:
            raise ValueError(f"`discount` must be in [0, 1], got {discount!r}.")
        self.discount, self.clip = float(discount), _check_clip(clip)
        with self.name_scope:
            self.stats = RunningMeanStd((), name="return_stats")
            self.returns = tf.Variable(tf.zeros([int(num_envs)], tf.float64),
                                       trainable=False, name="returns")

    def update(self, rewards, dones):
        """One step of the envs: R ← γ R + r enters the statistics, then R is
        reset to 0 where the episode ended (terminated or truncated).

        Args:
          rewards: [num_envs], the raw rewards.
          dones: [num_envs] bool.
        """
        returns = self.returns * self.discount + tf.cast(rewards, tf.float64)
        self.stats.update(returns)
        self.returns.assign(tf.where(tf.cast(dones, tf.bool),
                                     tf.zeros_like(returns), returns))

    def __call__(self, rewards):
        """r / √(v_R + 1e-8), clipped, as float32."""
        return tf.cast(scale(rewards, self.stats.var, self.clip), tf.float32)

    def scale_and_update(self, rewards, dones):
        """`update` with this step's rewards, then their scaled values (SB3's
        order: the statistics include the step they scale)."""
        self.update(rewards, dones)
        return self(rewards)

