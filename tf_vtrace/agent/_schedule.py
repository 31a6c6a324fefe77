"""What the training loop does when: checkpoints, evaluations, and how
many updates one learner call may make before the next of them."""

import time

__all__ = ["Schedule"]


class Schedule:
    """When the loop's periodic work comes (Sample Factory's periodic
    callbacks, Acme's `Checkpointer(time_delta_minutes=…)`, in small): a
    checkpoint every `Config.checkpoint_updates` updates, or where that is
    None `Config.checkpoint_every_s` seconds after the last one; a greedy
    evaluation when its `TrainingEvaluation` says so; and how many updates
    one learner call may make before the next of them or the run's end.

    Args:
      config: The run's `Config`.
      updates_per_call: `Learner.updates_per_call`.
    """

    def __init__(self, config, updates_per_call):
        self.config, self.updates_per_call = config, updates_per_call
        self.evaluation = None  # A `TrainingEvaluation` (set by the loop).
        self.checkpoint_saved()

    def checkpoint_saved(self):
        """Starts the wait for the next timed checkpoint."""
        self.next_checkpoint = (time.monotonic()
                                + self.config.checkpoint_every_s)

    def call_size(self, counters):
        """The most updates the next learner call may make: up to
        `updates_per_call`, ending at the first one that the run's end, an
        evaluation or a checkpoint by update count follows (so that they
        come where one update per call puts them)."""
        most = 1
        while most < self.updates_per_call and not self._due_after(
                counters, most):
            most += 1
        return most

    def checkpoint_due(self, counters):
        """Whether a checkpoint is due after the update `counters` end at."""
        if self.config.checkpoint_updates is not None:
            return self._counted_checkpoint_at(counters.updates)
        return time.monotonic() >= self.next_checkpoint

    def evaluation_due(self, counters):
        """Whether an evaluation is due after the update `counters` end at
        (always after the run's last)."""
        return self.evaluation is not None and self.evaluation.due(
            counters.env_steps, counters.updates == self.config.num_updates)

    def _due_after(self, counters, ahead):
        """Whether the run's end, an evaluation or a checkpoint by update
        count follows the update `ahead` updates from now."""
        updates = counters.updates + ahead
        return (updates >= self.config.num_updates
                or self._counted_checkpoint_at(updates)
                or (self.evaluation is not None and self.evaluation.due(
                    counters.env_steps + ahead * self.config.steps_per_update,
                    False)))

    def _counted_checkpoint_at(self, updates):
        """Whether a checkpoint by update count is due after `updates`."""
        every = self.config.checkpoint_updates
        return every is not None and updates % every == 0
