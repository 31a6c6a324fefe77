"""Actor backends: where the actors run, behind one contract.

Every backend is an `tf_vtrace.agent.actor.ActorBackend`: ``set_weights(weights,
version)`` with a list of numpy arrays, ``collect()`` returning one unroll
dict with `tf_vtrace.agent.actor.UNROLL_KEYS`, ``close()``. Four backends,
chosen by `Config.backend` (`make_actors`), one module each:

* ``"thread"``: `ThreadActors` (`threads`, the default), actors in threads
  of this process, filling a bounded queue while the learner learns;
* ``"local"``: one `LocalActor` in this process (`tf_vtrace.agent.actor`),
  called by the learner: the synchronous loop (collect, then learn), for
  reproducible experiments and the artificial `Config.policy_lag`;
* ``"process"``: `ProcessActors` (`processes`), actors in worker processes
  of the standard library, on the out-of-process base (`_remote`);
* ``"ray"``: `RayActors` (`ray_actors`), one Ray actor per `LocalActor`, on
  the same base (the `ray` extra; Ray is imported only when this backend is
  built).

What they share (`_common`): the failure counts, the seeds and the stop's
deadline.

``collect_queued()`` takes an unroll only if one is ready already (queued
by a thread, or finished by a process or Ray actor), never waiting: the
learner updates on it in the same call (`Config.updates_per_call`). While
the learner learns on one unroll the actors keep acting with older
weights, so the unrolls lag behind the learner; each one carries the
``policy_version`` it was acted with, and `Learner.step` reports the lag of
every unroll (learner version − that version).

Every backend acts the unrolls the run has updates left for and no more, so
a finished run leaves none behind. At a stop before that (Ctrl-C, an actor
failure) the training loop calls ``stop_acting``: no unroll is started any
more, and ``collect`` returns those already started (``pending``) for the
learner to learn on; what is left at ``close`` is counted in
``discarded_unrolls``.

An actor that dies (its process killed, `ray.kill`) or raises is replaced
by a new one, seeded from (seed, learner version) as in
`tf_vtrace.agent.actor.actor_seed`, that acts with the newest weights; the
restarts are counted in ``restarts_per_actor``. At the
`Config.max_actor_failures`-th failure of one actor in a row, `collect`
raises `ActorFailure` with the actor's index and how it last ended (its
traceback, or its exit code).

Actor i of this host steps envs seeded from ``config.seed + offset`` with
offset = (host index · num_actors + i) · num_envs (`actor_seed_offset`), so
no two envs share a seed, and actor 0 of host 0 is the same as the
``"local"`` backend.
"""

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent.backends._common import ActorFailure, actor_seed_offset
from tf_vtrace.agent.backends.processes import ProcessActors
from tf_vtrace.agent.backends.ray_actors import RayActors
from tf_vtrace.agent.backends.threads import ThreadActors

__all__ = ["ActorFailure", "ProcessActors", "RayActors", "ThreadActors",
           "actor_seed_offset", "make_actors"]


def make_actors(config, worker_index=0, start_update=0, prepare=None):
    """The backend `config.backend` with `config.num_actors` actors.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run (seeds, see the
        module doc).
      start_update: The learner update the run starts at (a resumed run's;
        seeds, see `tf_vtrace.agent.actor.actor_seed`).
      prepare: None, or the backend's `ActorBackend.prepare` hook: a
        function applied to each unroll before it is queued, returning the
        unroll to queue instead (`Learner.prepare`). The ``"thread"``
        backend's actor threads call it, off the learner's thread, while
        the learner is behind (`ThreadActors`); the other backends return
        their unrolls as acted.

    Returns:
      An `ActorBackend` with ``action_policy``, ``head_sizes`` (None for a
      Box) and ``version`` attributes.
    """
    if config.backend == "local":
        return actor_lib.LocalActor(
            config, seed_offset=actor_seed_offset(config, 0, worker_index),
            start_update=start_update)
    backend = {"thread": ThreadActors, "process": ProcessActors,
               "ray": RayActors}[config.backend]
    if backend is ThreadActors:
        return backend(config, worker_index, start_update, prepare)
    return backend(config, worker_index=worker_index, start_update=start_update)
