"""The Ray backend on a separately started Ray cluster (``ray start --head``),
reached through RAY_ADDRESS, as docs/howto/actors.md tells users to run it.

The head runs on 127.0.0.1 at a free port with its own temporary directory
and its own authentication token; `ray start --block` runs in its own
process group under ``timeout -s KILL``, and the test ends it by that group
(``ray stop`` would stop every Ray on the machine, other tests' too).
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tf_vtrace.agent import backends
from tf_vtrace.agent.backends import ray_actors
from tf_vtrace.agent.config import Config

# Every child process is killed after this many seconds, whatever happens.
_KILL_AFTER_S = 300


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port, process, timeout_s):
    """Waits until something accepts connections at 127.0.0.1:`port`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ray start exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1.).close()
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no Ray head at 127.0.0.1:{port} after {timeout_s} s")


def _stop_process_group(process):
    """SIGTERM to the head's process group (Ray shuts down), SIGKILL to
    whatever is left of it after a grace period."""
    for sig, grace_s in ((signal.SIGTERM, 20.), (signal.SIGKILL, 5.)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + grace_s
        while time.time() < deadline:
            process.poll()
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def _python(args, env):
    return subprocess.run(
        ["timeout", "-s", "KILL", str(_KILL_AFTER_S), sys.executable, *args],
        capture_output=True, text=True, env=env)


def test_unreachable_ray_address_names_it(monkeypatch):
    """Nothing listens at RAY_ADDRESS: a ConnectionError naming it, at once
    (Ray alone retries for minutes)."""
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    # Import Ray first, as RayActors would (seconds on a loaded machine): the
    # clock then times the connection attempt alone, refused in milliseconds.
    ray_actors._import_ray(loopback=True, start_here=False)
    start = time.time()
    with pytest.raises(ConnectionError, match=f"RAY_ADDRESS='{address}'"):
        backends.RayActors(Config(backend="ray", num_actors=1,
                                  jit_compile=False))
    assert time.time() - start < 30


@pytest.mark.slow
def test_train_on_a_separately_started_ray_head():
    """`ray start --head` on 127.0.0.1, then `train --backend ray` with
    RAY_ADDRESS: the two actors run in that cluster (its worker logs name
    them), the run completes, and a driver without RAY_AUTH_MODE=token gets
    an error that says so."""
    temp_dir = tempfile.mkdtemp(prefix="tfv_ray_")  # short: socket paths
    port, client_port = _free_port(), _free_port()
    token_path = os.path.join(temp_dir, "auth_token")
    with open(token_path, "w") as token_file:
        token_file.write(secrets.token_hex(32))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               RAY_USAGE_STATS_ENABLED="0",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path)
    env.pop("RAY_ADDRESS", None)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen(
        ["timeout", "-s", "KILL", str(_KILL_AFTER_S), ray_cli, "start",
         "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         f"--ray-client-server-port={client_port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp_dir}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        _wait_for_port(port, head, timeout_s=60)
        driver_env = dict(env, RAY_ADDRESS=f"127.0.0.1:{port}")
        out = os.path.join(temp_dir, "run")
        updates = 20
        result = _python(
            ["-m", "tf_vtrace.agent", "train", "--out", out,
             "--backend", "ray", "--num-actors", "2", "--num-envs", "4",
             "--unroll-length", "8", "--total-env-steps", str(updates * 32),
             "--jit-compile", "false", "--no-progress"], driver_env)
        assert result.returncode == 0, result.stdout + result.stderr[-4000:]
        assert (f"Connecting to existing Ray cluster at address: 127.0.0.1:"
                f"{port}") in result.stderr
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        assert summary["backend"] == "ray" and summary["num_actors"] == 2
        assert summary["learner_updates"] == updates
        assert sum(summary["unrolls_per_actor"]) == updates
        assert min(summary["unrolls_per_actor"]) >= 1
        logs = os.path.join(temp_dir, "session_latest", "logs")
        actor_logs = [name for name in os.listdir(logs)
                      if name.startswith("worker-") and "_RemoteActor" in
                      open(os.path.join(logs, name), errors="replace").read()]
        assert len(actor_logs) >= 2, sorted(os.listdir(logs))

        no_token_env = dict(driver_env)
        del no_token_env["RAY_AUTH_MODE"], no_token_env["RAY_AUTH_TOKEN_PATH"]
        result = _python(["-c", (
            "from tf_vtrace.agent import backends\n"
            "from tf_vtrace.agent.config import Config\n"
            "backends.RayActors(Config(backend='ray', num_actors=1))\n")],
            no_token_env)
        assert result.returncode == 1, result.stderr[-4000:]
        last_line = result.stderr.strip().splitlines()[-1]
        assert last_line.startswith("ConnectionError: RAY_ADDRESS="), last_line
        assert "RAY_AUTH_MODE=token" in last_line, last_line
    finally:
        _stop_process_group(head)
        shutil.rmtree(temp_dir, ignore_errors=True)
