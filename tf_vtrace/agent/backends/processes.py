"""The ``"process"`` backend: actors in worker processes of the standard library.

`ProcessActors` runs `Config.num_actors` worker processes of the standard
library's `multiprocessing` (spawn start method, so TensorFlow is never
forked), each running a `LocalActor` (`_process_worker`); weights and
unrolls travel over pipes as numpy arrays.
"""

import multiprocessing
import multiprocessing.connection
import signal
import traceback
import weakref

from tf_vtrace.agent.backends._common import _JOIN_TIMEOUT_S
from tf_vtrace.agent.backends._remote import _ActorDied, _AsyncActors, _RemoteActor


class ProcessActors(_AsyncActors):
    """`config.num_actors` `LocalActor`s in worker processes (stdlib).

    Workers are started with the spawn method (a fresh interpreter: forking a
    process that runs TensorFlow is unsafe), ignore Ctrl-C and SIGTERM (the
    training loop handles them and calls `close`), and exit when the pipe to this process
    closes, so they do not outlive it. A worker that dies or raises is
    replaced (see `_AsyncActors`).

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run.
    """

    def __init__(self, config, worker_index=0, start_update=0):
        super().__init__(config, worker_index, start_update)
        self._context = multiprocessing.get_context("spawn")
        self._connections = [None] * self.num_actors
        self._processes = [None] * self.num_actors
        # Runs at `close`, at garbage collection or at interpreter exit (it
        # reads the lists when it runs: replaced workers are stopped too).
        self._finalizer = weakref.finalize(
            self, _stop_processes, self._connections, self._processes)
        for index in range(self.num_actors):
            self._start(index, start_update)

    def _start(self, index, start_update):
        if self._processes[index] is not None:  # A failed worker: end it.
            _stop_processes([self._connections[index]],
                            [self._processes[index]])
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(
            target=_process_worker, daemon=True,
            name=f"tf_vtrace-actor-{index}",
            args=(child_end, self.config, self._seed_offset(index),
                  start_update))
        process.start()
        child_end.close()
        self._connections[index], self._processes[index] = parent_end, process

    def _submit(self, index, weights, version):
        try:
            self._connections[index].send((weights, version))
        except OSError:
            pass  # A dead worker: its pipe reads as closed at `_receive`.

    def _poll(self, indices, block):
        connections = [self._connections[i] for i in indices]
        while True:
            ready = multiprocessing.connection.wait(
                connections, timeout=1. if block else 0.)
            # A dead worker whose pipe does not read as closed yet.
            ready += [self._connections[i] for i in indices
                      if not self._processes[i].is_alive()
                      and self._connections[i] not in ready]
            if ready or not block:
                return [indices[connections.index(c)] for c in ready]

    def _receive(self, index):
        try:
            kind, payload = self._connections[index].recv()
        except (EOFError, OSError):
            self._processes[index].join(_JOIN_TIMEOUT_S)
            raise _ActorDied(
                f"actor process {index} (pid {self._processes[index].pid}) "
                f"exited (exit code {self._processes[index].exitcode}).") from None
        if kind == "error":
            raise _ActorDied(f"actor process {index} failed:\n{payload}")
        return payload

    def close(self):
        """Stops the workers (killed if they do not exit in time)."""
        self._count_discarded()
        self._finalizer()


def _process_worker(connection, config, seed_offset, start_update):
    """A worker process: serves unroll requests until the pipe closes.

    Ctrl-C and SIGTERM are left to the training process (a terminal or a
    scheduler may signal the whole process group): it finishes its update
    and closes the pipe, which ends this loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    actor = None
    try:
        actor = _RemoteActor(config, seed_offset, start_update)
        while True:
            request = connection.recv()
            if request is None:
                break
            connection.send(("unroll", actor.unroll(*request)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # The training process closed the pipe: stop.
    except Exception:
        try:
            connection.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if actor is not None:
            actor.close()
        connection.close()


def _stop_processes(connections, processes):
    """Stops the workers; a slot whose worker never started (its start
    raised in `ProcessActors.__init__`) holds None and is skipped."""
    connections = [c for c in connections if c is not None]
    processes = [p for p in processes if p is not None]
    for connection in connections:
        try:
            connection.send(None)
        except OSError:
            pass  # Already gone.
        # A worker blocked sending an unroll gets a broken pipe and exits.
        connection.close()
    for process in processes:
        process.join(_JOIN_TIMEOUT_S)
        if process.is_alive():  # Workers ignore SIGTERM: kill.
            process.kill()
            process.join()
