"""The training run's progress bar: env steps, with the rates, the policy
lag and the returns beside them."""

import time

__all__ = ["ProgressBar"]


class ProgressBar:
    """The run's progress bar (tqdm, counting env steps), after the lines
    that open a resumed run or one that checkpoints by update count.

    Args:
      config: The run's `Config`.
      enabled: Show it (else it only counts).
      counters: The loop's `LoopCounters` it starts at.
      resumed: Whether the run resumed (said in a line).
    """

    def __init__(self, config, enabled, counters, resumed=False):
        from tqdm import tqdm
        self.steps_per_update = config.steps_per_update
        self.bar = tqdm(total=config.num_updates * config.steps_per_update,
                        initial=counters.env_steps, unit="step", unit_scale=True,
                        disable=not enabled, dynamic_ncols=True, desc=config.env_id)
        self.next_postfix = 0.  # `time.monotonic()` of the next postfix.
        if resumed:
            self.write(f"resuming at update {counters.updates} "
                       f"(env step {counters.env_steps})")
        if config.checkpoint_every is None and config.checkpoint_updates:
            self.write(f"checkpoints every {config.checkpoint_updates} updates "
                       "(--checkpoint-every), not by time: a multi-worker run's "
                       "hosts must checkpoint at the same update")

    def write(self, line):
        """Prints `line` above the bar."""
        self.bar.write(line)

    def close(self):
        self.bar.close()

    def show(self, rates, diagnostics, recorder, evaluation):
        """Advances the bar by one update; its numbers (`rates`, the
        update's policy lag, `recorder`'s mean return and `evaluation`'s
        last greedy one) are set at most once per redraw interval
        (formatting them at every update cost the learner thread, the
        pipeline's slower side, ≈30 µs)."""
        self.bar.update(self.steps_per_update)
        now = time.monotonic()
        if self.bar.disable or now < self.next_postfix:
            return
        self.next_postfix = now + self.bar.mininterval
        postfix = {"env/s": f"{rates['env_steps_per_s']:.0f}",
                   "learn/s": f"{rates['learner_steps_per_s']:.1f}",
                   "lag": f"{diagnostics['policy_lag']:.0f}",
                   "return": f"{recorder.mean_return:.1f}"}
        if evaluation is not None and evaluation.last_return is not None:
            postfix["greedy"] = f"{evaluation.last_return:.1f}"
        self.bar.set_postfix(postfix, refresh=False)
