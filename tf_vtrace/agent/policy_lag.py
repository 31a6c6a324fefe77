"""Policy lag: hand the actor weights that are `lag` learner updates old."""

import collections

__all__ = ["WeightHistory"]


class WeightHistory:
    """The last `lag + 1` learner weights, with their versions.

    `push` the learner's weights after every update; `lagged` returns the
    oldest kept: version max(0, newest − lag). With lag 0 that is the newest,
    so the actor is on-policy.

    Args:
      lag: Learner updates between the acting and the learning weights.

    Examples:
      >>> history = WeightHistory(lag=2)
      >>> for version in range(5):
      ...     history.push(version, [f"weights {version}"])
      >>> history.lagged()
      (2, ['weights 2'])
    """

    def __init__(self, lag):
        self._kept = collections.deque(maxlen=lag + 1)

    def push(self, version, weights):
        """Keeps `weights` (a list of numpy arrays) of learner `version`."""
        self._kept.append((int(version), weights))

    @property
    def newest_version(self):
        """The version last pushed."""
        return self._kept[-1][0]

    def kept(self):
        """The kept `(version, weights)`, oldest first (pushed again in
        this order, they rebuild the history: a resumed run's)."""
        return list(self._kept)

    def lagged(self):
        """`(version, weights)`: the newest weights at least `lag` updates old
        (the first ones while fewer updates have happened)."""
        return self._kept[0]
