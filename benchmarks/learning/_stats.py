"""Statistics shared by the learning benchmarks."""

import numpy as np

from tf_vtrace.agent import recording

BOOTSTRAP_SAMPLES = 2000


def bootstrap_band(samples, rng):
    """(mean, low, high): the mean over seeds (axis 0) and its 95 % bootstrap
    interval (resampling the seeds with replacement)."""
    samples = np.asarray(samples, float)
    picks = rng.integers(0, len(samples), (BOOTSTRAP_SAMPLES, len(samples)))
    means = samples[picks].mean(axis=1)
    return (samples.mean(axis=0), *np.percentile(means, [2.5, 97.5], axis=0))


def return_curve(episodes_csv, grid, window=recording.RECENT_EPISODES):
    """The training return (running mean of `window` episodes) of a run's
    ``episodes.csv`` on the env steps `grid` (NaN without episodes)."""
    steps, returns = recording.read_episodes(episodes_csv)
    if not len(returns):
        return np.full(len(grid), np.nan)
    return np.interp(grid, steps, recording.running_mean(returns, window))
