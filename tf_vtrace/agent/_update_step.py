"""One update: the actor's unroll to the learner, and the skipped updates
that stop a run.

`actor_learner_steps` hands the actors the lagged weights, takes an unroll
(and those queued behind it) and runs the learner on them; `SkipStreak`
counts the updates in a row the learner skipped as non-finite and gives
the `NonFiniteUpdates` that stops the run at `Config.max_nonfinite_updates`.
"""

import math
import time

from tf_vtrace.agent import _faults, backends

__all__ = ["NonFiniteUpdates", "SkipStreak", "actor_learner_step",
           "actor_learner_steps"]


class NonFiniteUpdates(RuntimeError):
    """`Config.max_nonfinite_updates` learner updates in a row were skipped."""

    part = "the learner"


# Diagnostics that are not the update's own numbers (never tested).
_BOOKKEEPING = ("policy_lag", "update_skipped")


def _non_finite(diagnostics):
    """The names of the diagnostics that are NaN or ±inf."""
    return {key for key, value in diagnostics.items()
            if key not in _BOOKKEEPING and not math.isfinite(value)}


def actor_learner_step(actor, learner, history, idle=None):
    """One update: the actor acts with the lagged weights, the learner learns.

    With the synchronous ``"local"`` backend the actor collects the unroll
    here; with the others it was (mostly) acted while the learner learned
    on the ones before, and `collect` only takes it.

    Args:
      actor: An `ActorBackend`.
      learner: A `Learner`.
      history: The `WeightHistory` of the learner's weights (pushed here).
      idle: An `IdleClock` to add the time spent in `collect` to (or None).

    Returns:
      `(unroll, diagnostics)`.
    """
    return actor_learner_steps(actor, learner, history, idle)[0]


def actor_learner_steps(actor, learner, history, idle=None, most=1):
    """`actor_learner_step`, with the unrolls already queued behind the
    first (`ActorBackend.collect_queued`, up to `most` in all) learned on
    in the same call (`Learner.update_each`); the actors get the weights
    after the last. Returns a list of `(unroll, diagnostics)`, in order."""
    version, weights = history.lagged()
    if version != actor.version or history.newest_version == 0:
        actor.set_weights(weights, version)
    start = time.perf_counter()
    if idle is not None:
        idle.waiting_since = time.monotonic()
    try:
        unrolls = [actor.collect()]
    except (backends.ActorFailure, KeyboardInterrupt):
        raise
    except Exception as error:  # The synchronous actor's env, say.
        raise _faults.actor_failure(error) from error
    finally:
        if idle is not None:
            idle.waiting_since = None
    if idle is not None:
        idle.collect_s += time.perf_counter() - start
    while len(unrolls) < most:
        queued = actor.collect_queued()
        if queued is None:
            break
        unrolls.append(queued)
    updates = learner.update_each(unrolls)
    history.push(updates[-1].version, updates[-1].weights)
    return [(unroll, update.diagnostics)
            for unroll, update in zip(unrolls, updates)]


class SkipStreak:
    """The current streak of skipped (non-finite) learner updates, and what
    was non-finite in them.

    Args:
      most: `Config.max_nonfinite_updates`, the streak that stops the run.
    """

    def __init__(self, most):
        self.most = most
        self.length, self.names = 0, set()

    def count(self, diagnostics, version):
        """Counts one update (`diagnostics`: its learner's); the
        `NonFiniteUpdates` that stops the run at the `most`-th skipped in
        a row (else None). `version`: the learner's, whose weights stay."""
        if not diagnostics["update_skipped"]:
            self.length, self.names = 0, set()
            return None
        self.length += 1
        self.names |= _non_finite(diagnostics)
        if self.length < self.most:
            return None
        return NonFiniteUpdates(
            f"{self.length} learner updates in a row were skipped "
            f"(Config.max_nonfinite_updates={self.most}):"
            f" non-finite {', '.join(sorted(self.names))}. The "
            f"weights are those of learner update {version}.")
