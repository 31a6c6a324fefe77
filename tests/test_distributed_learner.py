"""The distributed learner equals the one-device learner.

Each program runs in its own process (tests/distributed_learner_worker.py):
logical devices and MultiWorkerMirroredStrategy's collective ops are set up
at program start. All runs use the real `Learner` on real CartPole unrolls,
with ``max_grad_norm`` far below the gradient norm so that clipping is active
in every step: that is where per-replica clipping goes wrong.

Tolerance: the replicas sum the gradient in a different order than one
device (two halves of the batch, then an all-reduce), so float32 results
agree to a few ulps (≈ 1e-7 relative, measured 3e-8 on the weights); 1e-5 is
far above that noise and far below what the control (per-replica clipping)
changes (≈ 3e-4) and what two steps change the weights by (≈ 2e-3).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

WORKER = os.path.join(os.path.dirname(__file__), "distributed_learner_worker.py")
TOLERANCE = 1e-5
KILL_AFTER_S = SUBPROCESS_TIMEOUT_S


def _command(*args):
    return ["timeout", "-s", "KILL", str(KILL_AFTER_S), sys.executable, WORKER,
            *args]


def _run(*args, env=None):
    result = subprocess.run(_command(*args), capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0 and "DONE" in result.stdout, (
        result.stdout + result.stderr[-5000:])


def _assert_same_diagnostics(want, got):
    for step_want, step_got in zip(want, got, strict=True):
        assert step_want.keys() == step_got.keys()
        for key, value in step_want.items():
            assert abs(step_got[key] - value) <= TOLERANCE * max(1., abs(value)), (
                key, value, step_got[key])


def _clipping_active(diagnostics):
    from distributed_learner_worker import CLIP_NORM
    norms = [d["gradient_norm"] for d in diagnostics]
    assert min(norms) > 10 * CLIP_NORM, norms


def test_mirrored_two_devices_equal_one_device(tmp_path):
    _run("mirrored", str(tmp_path))
    result = json.loads((tmp_path / "mirrored.json").read_text())
    assert result["versions"] == [2, 2, 2]
    assert result["initial_difference"] == 0.
    # vtrace_targets (no update) reads the mirrored weights too.
    assert result["targets_difference"] < TOLERANCE, result
    _clipping_active(result["one_device"])
    _assert_same_diagnostics(result["one_device"], result["mirrored"])
    assert result["weight_change"] > 100 * TOLERANCE
    assert result["weight_difference"] < TOLERANCE, result
    # The control: clipping each replica's gradient (Keras' apply_gradients
    # inside strategy.run) is a different update, which the tolerance sees.
    assert result["per_replica_clipping_difference"] > 10 * TOLERANCE, result


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _stop(process):
    """Kills the worker's whole process group (timeout and its python)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _run_workers(out):
    """Two workers on 127.0.0.1; True if both finished. When one fails the
    other waits for its peer forever, so it is killed at once."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes, logs = [], [out / f"worker{i}.log" for i in range(2)]
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            _command("worker", str(out), str(index)), env=env,
            stdout=logs[index].open("w"), stderr=subprocess.STDOUT,
            start_new_session=True))
    try:
        while any(p.poll() is None for p in processes):
            if any(p.poll() not in (None, 0) for p in processes):
                break
            time.sleep(0.2)
    finally:
        for process in processes:
            _stop(process)
    outputs = [log.read_text()[-3000:] for log in logs]
    return all(p.returncode == 0 for p in processes), ports, outputs


def test_multi_worker_equals_one_process(tmp_path):
    _run("reference", str(tmp_path))
    finished, ports, outputs = _run_workers(tmp_path)
    if not finished and any("ddress" in o and "use" in o for o in outputs):
        finished, ports, outputs = _run_workers(tmp_path)  # a port was taken
    assert finished, (ports, outputs)
    reference = np.load(tmp_path / "reference.npz")
    workers = [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]
    names = reference.files
    assert all(w.files == names for w in workers)
    for name in names:
        # The all-reduce hands both workers the same sums: bit-identical.
        np.testing.assert_array_equal(workers[0][name], workers[1][name])
        np.testing.assert_allclose(workers[0][name], reference[name], rtol=0,
                                   atol=TOLERANCE)
    want = json.loads((tmp_path / "reference.json").read_text())
    _clipping_active(want)
    for index in range(2):
        _assert_same_diagnostics(
            want, json.loads((tmp_path / f"worker{index}.json").read_text()))


def test_multi_worker_after_tensorflow_started_says_so(tmp_path):
    port, = _free_ports(1)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{port}"]},
         "task": {"type": "worker", "index": 0}}))
    _run("late", str(tmp_path), env=env)
    message = (tmp_path / "late.txt").read_text()
    assert "Config.strategy='multi_worker'" in message
    assert "before any TensorFlow op" in message


def test_training_loop_runs_mirrored(tmp_path):
    from distributed_learner_worker import TRAIN_UPDATES
    _run("train", str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["strategy"] == "mirrored"
    assert summary["learner_updates"] == TRAIN_UPDATES
    assert not summary["interrupted"]
    assert (tmp_path / "policy" / "saved_model.pb").exists()
    assert any(name.startswith("ckpt-") for name in
               os.listdir(tmp_path / "checkpoints"))


@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker"])
def test_strategy_is_a_config_choice(strategy):
    from tf_vtrace.agent.config import Config
    assert Config(strategy=strategy).strategy == strategy
    with pytest.raises(ValueError, match="Config.strategy"):
        Config(strategy="parameter_server")
