r"""Diagonal Gaussian policies as `dist_class`es of the loss and the core.

A continuous action a ∈ ℝ^D under a diagonal Gaussian policy has

    log π(a | x) = Σ_d [ −½ ((a_d − m_d) / σ_d)² − log σ_d − ½ log 2π ],

the sum over the D dimensions that the importance ratio of V-trace needs:
ρ = π(a|x) / μ(a|x) is the *joint* ratio, Π_d π_d(a_d) / μ_d(a_d). At a
given per-dimension policy lag log ρ is a sum of D independent terms (arXiv
1905.02363): under a ~ μ its mean drifts down by Σ_d KL(μ_d ‖ π_d) and its
spread grows like √D, so ρ strays further from 1 as D grows. The effective
sample size falls (ESS / N ≈ Π_d of the per-dimension ones), more steps get
a ρ far below 1 (their traces cut, their policy gradient weighed down), and
the fraction above ρ̄ is not monotone: with ρ̄ = 1 it falls (the median of
log ρ drifts below 0), with ρ̄ > 1 it rises at first. `impala_loss`'
``ess_fraction``, ``rho_clipped_fraction`` and ``mean_rho`` measure it.

The parameters of one step are laid out per dimension, mean then log-std:
``params[..., 2d]`` = m_d and ``params[..., 2d + 1]`` = log σ_d, so that
a head of 2·D parameters (`diagonal_gaussian`, one action vector [..., D]) and
D heads of 2 parameters (`normal`, one scalar action each, the packed Keras
layout of `tf_vtrace.keras`) are the same numbers and give the same log ρ,
entropy and KL (sums over the dimensions). `gaussian_params` builds the
layout from a mean and a log-std (state-dependent, or one learned vector
broadcast over the batch).

The Gaussian is not squashed: a tanh would make log π infinite at the
bounds of the action space. Clip the action to the space only on its way to
the environment, and keep the unclipped one for the loss.
"""

import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions

__all__ = ["diagonal_gaussian", "normal", "gaussian_params"]


def _split(params, name):
    params = tf.convert_to_tensor(params)
    width = params.shape[-1] if params.shape.rank else None
    if width is not None and width % 2:
        raise ValueError(
            f"`{name}` must hold a mean and a log-std per action dimension "
            f"(an even last axis, 2·D, laid out [m_0, log σ_0, m_1, ...]); got "
            f"shape {params.shape}.")
    pairs = tf.reshape(params, tf.concat([tf.shape(params)[:-1], [-1, 2]], 0))
    if params.shape.rank is not None:
        pairs.set_shape(params.shape[:-1].concatenate(
            [None if width is None else width // 2, 2]))
    return pairs[..., 0], pairs[..., 1]


def diagonal_gaussian(params):
    """A D-dimensional diagonal Gaussian from [..., 2·D] parameters.

    Args:
      params: Per dimension d, the mean at ``2d`` and the log standard
        deviation at ``2d + 1`` (see the module doc).

    Returns:
      `tfd.MultivariateNormalDiag` with batch shape ``params.shape[:-1]`` and
      event shape [D]: its `log_prob` of actions [..., D] is one number per
      step, the sum over the dimensions.

    Examples:
      >>> import numpy as np
      >>> from tf_vtrace.distributions import diagonal_gaussian
      >>> dist = diagonal_gaussian(np.zeros([4, 2, 6], np.float32))  # T, B, 2·D
      >>> dist.batch_shape, dist.event_shape
      (TensorShape([4, 2]), TensorShape([3]))
    """
    mean, log_std = _split(params, "params")
    return tfd.MultivariateNormalDiag(loc=mean, scale_diag=tf.exp(log_std))


def normal(params):
    """A one-dimensional Gaussian from [..., 2] parameters (mean, log-std).

    One action dimension as one head: with ``action_sizes=[2] * D`` the
    packed Keras layout carries a D-dimensional diagonal Gaussian as D heads,
    whose log-probabilities the loss sums.

    Args:
      params: The mean at ``[..., 0]`` and the log standard deviation at
        ``[..., 1]``.

    Returns:
      `tfd.Normal` with batch shape ``params.shape[:-1]``.
    """
    params = tf.convert_to_tensor(params)
    if params.shape.rank is not None and params.shape[-1] not in (None, 2):
        raise ValueError(
            "`params` of `normal` must be [..., 2] (a mean and a log-std); got "
            f"shape {params.shape}. For D dimensions in one head use "
            "`diagonal_gaussian`, or D heads of 2 (action_sizes=[2] * D).")
    return tfd.Normal(loc=params[..., 0], scale=tf.exp(params[..., 1]))


def gaussian_params(mean, log_std):
    """[..., 2·D] parameters (module doc layout) from a mean and a log-std.

    Args:
      mean: [..., D].
      log_std: [..., D] (state-dependent) or [D] (one learned vector,
        broadcast over the leading axes).

    Returns:
      [..., 2·D]: m_0, log σ_0, m_1, log σ_1, ...
    """
    mean = tf.convert_to_tensor(mean)
    log_std = tf.broadcast_to(tf.cast(log_std, mean.dtype), tf.shape(mean))
    pairs = tf.stack([mean, log_std], axis=-1)
    params = tf.reshape(pairs, tf.concat([tf.shape(mean)[:-1], [-1]], 0))
    if mean.shape.rank is not None:
        width = mean.shape[-1]
        params.set_shape(mean.shape[:-1].concatenate(
            [None if width is None else 2 * width]))
    return params
