"""The process and Ray actor backends keep LocalActor's unroll contract.

Real worker processes run real CartPole envs. With one actor the unrolls must
equal a LocalActor's with the same seed and weights; with two, every unroll
has LocalActor's keys, shapes and dtypes, and ``policy_version`` follows
`set_weights` (the two unrolls in flight when new weights arrive keep the old
version, every later one has the new).
"""
import time

import numpy as np
import pytest

from tf_vtrace.agent import actor, backends
from tf_vtrace.agent.config import Config


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_backend_matches_local_actor(backend):
    config = Config(num_envs=3, unroll_length=4, max_episode_steps=3,
                    jit_compile=False, backend=backend, num_actors=1)
    local = actor.LocalActor(config.replace(backend="local"))
    weights = local.model.get_weights()
    local.set_weights(weights, 5)
    expected = [local.collect() for _ in range(2)]
    for num_actors in (1, 2):
        remote = backends.make_actors(config.replace(num_actors=num_actors))
        try:
            remote.set_weights(weights, 5)
            got = [remote.collect() for _ in range(2)]
            remote.set_weights(weights, 9)
            # The second actor may still be starting TensorFlow while the
            # first serves many unrolls: wait for it, bounded in time.
            versions, deadline = [], time.time() + 120
            while versions.count(5) < num_actors and time.time() < deadline:
                versions.append(int(remote.collect()["policy_version"]))
        finally:
            remote.close()
        for want_unroll, unroll in zip(expected, got):
            assert sorted(actor.UNROLL_KEYS) == sorted(unroll)
            for key in actor.UNROLL_KEYS:
                want, have = np.asarray(want_unroll[key]), np.asarray(unroll[key])
                assert want.shape[1:] == have.shape[1:] or key.startswith("episode"), key
                assert want.dtype == have.dtype, key
                if num_actors == 1:
                    np.testing.assert_allclose(have, want, atol=1e-6, err_msg=key)
        assert versions.count(5) == num_actors and set(versions) <= {5, 9}, versions
