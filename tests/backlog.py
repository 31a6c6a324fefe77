"""An actor backend with an unroll always queued behind the one collected:
the synchronous `LocalActor`, whose `collect_queued` acts one more. Runs
with it make `Config.updates_per_call` updates per learner call wherever
the loop allows, deterministically. Also: the check that `collect_queued`
never waits."""
import time

from tolerances import POLL_TIMEOUT_S

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


def assert_collect_queued_does_not_wait(actors):
    """Stops the acting, collects the unrolls in flight, then checks that
    `collect_queued`, with none left, gives None at once (1 s allowed:
    waiting would take `POLL_TIMEOUT_S`)."""
    actors.stop_acting(POLL_TIMEOUT_S)
    while actors.pending():
        actors.collect()
    start = time.time()
    assert actors.collect_queued() is None
    assert time.time() - start < 1
