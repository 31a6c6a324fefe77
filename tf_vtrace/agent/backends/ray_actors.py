"""The ``"ray"`` backend: actors as Ray actors, and Ray's address and auth.

`RayActors` runs one Ray actor per `LocalActor` (the `ray` extra: Ray is
imported only when this backend is built, by `_import_ray`). It joins the
cluster at ``RAY_ADDRESS`` (`_connect_ray`, which fails at once, naming
the variable and the usual causes, where Ray alone would retry for
minutes) or starts a one-machine Ray on loopback.
"""

import os
import shutil
import socket
import sys
import tempfile

from tf_vtrace.agent.backends._remote import _ActorDied, _AsyncActors, _RemoteActor


def _import_ray(loopback, start_here):
    """Imports Ray.

    Args:
      loopback: Keep Ray's addresses on 127.0.0.1.
      start_here: Ray will be started by this process (no usage report).
    """
    if loopback:
        # Read when Ray is imported: without it Ray replaces a loopback
        # address by the machine's network address, both for a Ray it starts
        # and for a RAY_ADDRESS of 127.0.0.1 (where a head started with
        # --node-ip-address=127.0.0.1 listens).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if start_here:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "Config.backend='ray' needs Ray: pip install 'tf-vtrace[ray]'."
        ) from error
    return ray


class RayActors(_AsyncActors):
    """`config.num_actors` `LocalActor`s as Ray actors.

    Uses the Ray cluster this process is connected to: `ray.init(address=...)`
    called before, or the one at the ``RAY_ADDRESS`` environment variable
    (``HEAD_IP:PORT`` of a ``ray start --head``; a ``ConnectionError``
    naming RAY_ADDRESS if it cannot be reached; for a 127.0.0.1 address Ray
    is kept on loopback as below). Without either it starts a one-machine
    Ray on loopback (own temporary directory, no dashboard, usage statistics
    off), shut down again by `close`. Weights go into Ray's object store once
    per version and are shared by the actors.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run.
      num_cpus_per_actor: Ray CPUs each actor reserves.
    """

    def __init__(self, config, worker_index=0, start_update=0,
                 num_cpus_per_actor=1):
        super().__init__(config, worker_index, start_update)
        address = os.environ.get("RAY_ADDRESS")
        start_here = address is None and not _ray_initialized()
        ray = _import_ray(
            loopback=start_here or _is_loopback_address(address),
            start_here=start_here)
        self._ray = ray
        self._temp_dir = None
        if not ray.is_initialized():
            if address is not None:
                _connect_ray(ray, address)
            else:
                self._temp_dir = tempfile.mkdtemp(prefix="tf_vtrace_ray_")
                ray.init(num_cpus=self.num_actors * num_cpus_per_actor,
                         include_dashboard=False, log_to_driver=False,
                         _temp_dir=self._temp_dir)
        self._remote_class = ray.remote(num_cpus=num_cpus_per_actor)(_RemoteActor)
        self._actors = [None] * self.num_actors
        for index in range(self.num_actors):
            self._start(index, start_update)
        self._pending = {}
        self._weights_ref = None

    def _start(self, index, start_update):
        if self._actors[index] is not None:  # A failed actor: end it.
            self._ray.kill(self._actors[index])
        self._actors[index] = self._remote_class.remote(
            self.config, self._seed_offset(index), start_update)

    def _submit(self, index, weights, version):
        if weights is not None:
            if self._weights_ref is None or self._weights_ref[0] != version:
                self._weights_ref = (version, self._ray.put(weights))
            weights = self._weights_ref[1]
        self._pending[index] = self._actors[index].unroll.remote(weights, version)

    def _poll(self, indices, block):
        refs = [self._pending[i] for i in indices]
        ready, _ = self._ray.wait(refs, num_returns=1 if block else len(refs),
                                  timeout=None if block else 0)
        if block:  # Every other one that is ready too.
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        return [indices[refs.index(ref)] for ref in ready]

    def _receive(self, index):
        errors = self._ray.exceptions
        try:
            return self._ray.get(self._pending.pop(index))
        except (errors.RayActorError, errors.RayTaskError) as error:
            raise _ActorDied(f"Ray actor {index}: {error}") from None

    def close(self):
        """Kills the actors; shuts down a Ray started by this backend."""
        self._count_discarded()
        ray = self._ray
        for handle in self._actors:
            ray.kill(handle)
        self._actors, self._pending = [], {}
        if self._temp_dir is not None:
            ray.shutdown()
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None


# How long `_connect_ray` waits for the head's port to accept a connection.
_RAY_CONNECT_TIMEOUT_S = 10.


def _host_and_port(address):
    """(host, port) of a plain ``host:port`` Ray address, else None (``auto``,
    ``ray://…`` client addresses: left to Ray)."""
    if "://" in address:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _is_loopback_address(address):
    """Whether the Ray address `address` (or None) names this machine's
    loopback interface."""
    host_port = address and _host_and_port(address)
    if not host_port:
        return False
    host = host_port[0]
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _connect_ray(ray, address):
    """Connects to the Ray cluster at `address` (the value of RAY_ADDRESS).

    Ray itself retries an unreachable address for minutes and then reports
    only "Failed to connect"; here an address nothing listens on fails at
    once, and a failed connection names RAY_ADDRESS and the usual causes.
    """
    hint = (f"RAY_ADDRESS={address!r}: could not connect to a Ray cluster "
            "there. Start one with `ray start --head --port=PORT` on the head "
            "host and set RAY_ADDRESS=HEAD_IP:PORT, or unset RAY_ADDRESS to "
            "let the backend start a one-machine Ray.")
    host_port = _host_and_port(address)
    if host_port is not None:
        try:
            socket.create_connection(host_port, _RAY_CONNECT_TIMEOUT_S).close()
        except OSError as error:
            raise ConnectionError(f"{hint} ({error})") from error
    try:
        ray.init(log_to_driver=False)
    except ConnectionError as error:
        if _mentions(error, "AuthenticationError"):
            hint += (
                " The cluster uses token authentication (`ray start` turns it "
                "on when ~/.ray/auth_token exists) and Ray sends no token to "
                "an address given explicitly unless RAY_AUTH_MODE=token is "
                "set: set it, with the head's token in ~/.ray/auth_token, in "
                "RAY_AUTH_TOKEN_PATH or in RAY_AUTH_TOKEN.")
        raise ConnectionError(hint) from error


def _mentions(error, text):
    """Whether `text` is in the type name or message of `error` or of an
    exception in its cause chain (Ray puts the underlying error's traceback
    into the message of the one it raises)."""
    while error is not None:
        if text in type(error).__name__ or text in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _ray_initialized():
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
