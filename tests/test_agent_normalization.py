"""tf_vtrace.agent.normalization: running statistics against NumPy (float64),
checkpoint round trip, and a SavedModel that normalises the same in a fresh
process."""
import doctest
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tolerances import SUBPROCESS_TIMEOUT_S

import tf_vtrace.agent.normalization
from tf_vtrace.agent.normalization import (
    ObservationNormalizer,
    RewardScaler,
    RunningMeanStd,
)


def batches(seed=0, shape=(3,)):
    rng = np.random.default_rng(seed)
    scale = np.array([1., 100., 1e-3])[:shape[0]] if shape else 5.
    return [rng.normal(7., 1., (n,) + shape) * scale + 1e4
            for n in (1, 5, 64, 2, 300)]


def numpy_stats(data):
    """Mean and population variance of everything, float64."""
    return data.mean(0), data.var(0)


@pytest.mark.parametrize("shape", [(3,), ()])
def test_running_stats_equal_numpys(shape):
    stats = RunningMeanStd(shape)
    data = batches(shape=shape)
    for batch in data:
        stats.update(batch)
    everything = np.concatenate(data)
    # Data at 1e4 with spreads from 1e-3 to 100: a naive Σx² would lose it.
    np.testing.assert_allclose(stats.mean.numpy(), everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var.numpy(), everything.var(0), rtol=1e-8)
    assert float(stats.count) == len(everything)
    assert stats.mean.dtype == tf.float64
    stats.update(np.zeros((0,) + shape))  # an empty batch changes nothing
    np.testing.assert_allclose(stats.var.numpy(), everything.var(0), rtol=1e-8)


def test_observations_are_normalised_and_clipped():
    norm = ObservationNormalizer((3,), clip=5.)
    data = batches()
    for batch in data:
        norm.update(batch)
    mean, var = numpy_stats(np.concatenate(data))
    x = np.concatenate(data)[:50]
    x[0] = mean + 100 * np.sqrt(var)  # far out: clipped to +5
    got = norm(x).numpy()
    assert got.dtype == np.float32
    want = np.clip((x - mean) / np.sqrt(var + 1e-8), -5., 5.)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got[0] == 5.).all()
    with pytest.raises(ValueError, match="`clip` must be a positive"):
        ObservationNormalizer((3,), clip=0.)


def test_reward_scale_is_the_std_of_the_discounted_return():
    """SB3's VecNormalize, written out: per env R ← γR + r, the variance of
    all R so far, r / √(var + 1e-8); R reset after a done."""
    rng = np.random.default_rng(1)
    num_envs, steps, gamma = 4, 60, 0.9
    rewards = rng.normal(2., 3., (steps, num_envs))
    dones = rng.random((steps, num_envs)) < 0.1
    scaler = RewardScaler(num_envs, discount=gamma, clip=None)
    returns, seen = np.zeros(num_envs), []
    for t in range(steps):
        got = scaler.scale_and_update(rewards[t], dones[t]).numpy()
        returns = gamma * returns + rewards[t]
        seen.append(returns.copy())
        _, var = numpy_stats(np.concatenate(seen))
        np.testing.assert_allclose(got, rewards[t] / np.sqrt(var + 1e-8), rtol=1e-5)
        returns[dones[t]] = 0.
    np.testing.assert_allclose(scaler.returns.numpy(), returns, rtol=1e-12)
    clipped = RewardScaler(1, clip=1.)
    assert float(clipped.scale_and_update([1000.], [False])[0]) == 1.


def test_checkpoint_round_trip(tmp_path):
    norm, scaler = ObservationNormalizer((3,)), RewardScaler(2)
    for batch in batches():
        norm.update(batch)
    scaler.update([1., 2.], [False, True])
    path = tf.train.Checkpoint(obs=norm, rew=scaler).write(str(tmp_path / "ckpt"))
    fresh_norm, fresh_scaler = ObservationNormalizer((3,)), RewardScaler(2)
    tf.train.Checkpoint(obs=fresh_norm, rew=fresh_scaler).read(path).assert_consumed()
    x = batches(seed=2)[2]
    np.testing.assert_array_equal(fresh_norm(x), norm(x))
    for a, b in zip(fresh_norm.variables + fresh_scaler.variables,
                    norm.variables + scaler.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


RELOAD = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    module = tf.saved_model.load(sys.argv[1])
    x = np.load(sys.argv[2])
    np.testing.assert_array_equal(module.normalize(tf.constant(x)).numpy(), np.load(sys.argv[3]))
    print("RELOADED_OK")
""")


def test_saved_model_normalises_the_same_in_a_fresh_process(tmp_path):
    norm = ObservationNormalizer((3,))
    for batch in batches():
        norm.update(batch)
    norm.normalize.get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
    tf.saved_model.save(norm, str(tmp_path / "norm"))
    x = batches(seed=3)[2].astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", norm.normalize(tf.constant(x)).numpy())
    result = subprocess.run(
        [sys.executable, "-c", RELOAD, str(tmp_path / "norm"), str(tmp_path / "x.npy"),
         str(tmp_path / "want.npy")],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0 and "RELOADED_OK" in result.stdout, (
        result.stdout + result.stderr[-4000:])


def test_module_doctests():
    assert doctest.testmod(tf_vtrace.agent.normalization).failed == 0
