"""What every actor backend shares: seeds, failure counts, stop deadlines."""

import sys
import time

# A worker that does not exit on its own within this many seconds of `close`
# is killed.
_JOIN_TIMEOUT_S = 5.
# How often a stopping learner polls the remote actors for the unrolls in
# flight (seconds).
_POLL_S = 0.005


class ActorFailure(RuntimeError):
    """An actor died or failed `Config.max_actor_failures` times in a row."""


def actor_seed_offset(config, actor_index, worker_index=0):
    """The `LocalActor` seed offset of actor `actor_index` on host `worker_index`.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      actor_index: 0 … num_actors − 1.
      worker_index: The host's index in a multi-worker run (0 otherwise).

    Returns:
      An int: (worker_index · num_actors + actor_index) · num_envs.

    Examples:
      >>> from tf_vtrace.agent.config import Config
      >>> actor_seed_offset(Config(num_envs=4, num_actors=2, backend="process"), 1)
      4
    """
    return (worker_index * config.num_actors + actor_index) * config.num_envs


class _FailureCounts:
    """Failures in a row of each actor: `record` raises `ActorFailure` at
    the `Config.max_actor_failures`-th, else says the actor is replaced."""

    def __init__(self, config):
        self.limit = config.max_actor_failures
        self.in_a_row = [0] * config.num_actors
        self.restarts = [0] * config.num_actors

    def succeeded(self, index):
        self.in_a_row[index] = 0

    def record(self, index, failure):
        self.in_a_row[index] += 1
        if self.in_a_row[index] >= self.limit:
            raise ActorFailure(
                f"actor {index} failed {self.in_a_row[index]} times in a row "
                f"(Config.max_actor_failures={self.limit}); the last "
                f"time:\n{failure}")
        print(f"actor {index} failed, starting a new one: {failure}",
              file=sys.stderr)
        self.restarts[index] += 1


def _check_drain_deadline(deadline):
    """Raises `ActorFailure` once `deadline` (`stop_acting`'s) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise ActorFailure("the actors did not hand in the unrolls they had "
                           "started within the time allowed after the stop")
