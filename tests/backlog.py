"""An actor backend with an unroll always queued behind the one collected:
the synchronous `LocalActor`, whose `collect_queued` acts one more. Runs
with it make `Config.updates_per_call` updates per learner call wherever
the loop allows, deterministically."""
from tf_vtrace.agent import actor, backends


class AlwaysQueued(actor.LocalActor):
    def collect_queued(self):
        return self.collect()


def use_always_queued(monkeypatch):
    """`train` builds an `AlwaysQueued` as its actor backend."""
    monkeypatch.setattr(
        backends, "make_actors",
        lambda config, start_update, **unused: AlwaysQueued(
            config, start_update=start_update))
