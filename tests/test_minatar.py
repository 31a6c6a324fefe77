"""MinAtar in the agent: the unroll contract on MinAtar/Breakout-v1 (shapes,
dtypes, episode ends against an independent replay of minatar's own env),
the network chosen for its grids, the presets, and a tiny training run
through the CLI with its SavedModel reloaded."""
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minatar")

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import (
    envs,
    networks,
)
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.presets import PRESETS

ENV_ID = "MinAtar/Breakout-v1"
# Breakout under a near-uniform policy ends an episode every ~10 steps.
T, B = 40, 3


@pytest.fixture(scope="module")
def breakout_unroll():
    config = Config(env_id=ENV_ID, num_envs=B, unroll_length=T, seed=5,
                    jit_compile=False)
    actor = actor_lib.LocalActor(config)
    yield config, actor.collect()
    actor.close()


def test_minatar_unroll_contract(breakout_unroll):
    _, unroll = breakout_unroll
    assert set(unroll) == set(actor_lib.UNROLL_KEYS)
    expected = {
        "observations": ((T + 1, B, 10, 10, 4), np.float32),
        "actions": ((T, B, 1), np.int32),
        "behaviour_logits": ((T, B, 3), np.float32),
        "rewards": ((T, B), np.float32), "discounts": ((T, B), np.float32),
        "terminated": ((T, B), np.bool_), "truncated": ((T, B), np.bool_),
        "final_observations": ((T, B, 10, 10, 4), np.float32),
    }
    for key, (shape, dtype) in expected.items():
        assert unroll[key].shape == shape, key
        assert unroll[key].dtype == dtype, key
    assert set(np.unique(unroll["observations"])) <= {0., 1.}
    assert unroll["actions"].min() >= 0 and unroll["actions"].max() < 3
    # Episodes end by losing the ball (terminal, γ = 0); no time limit.
    assert unroll["terminated"].sum() >= B and not unroll["truncated"].any()
    np.testing.assert_array_equal(unroll["discounts"] == 0, unroll["terminated"])
    assert len(unroll["episode_returns"]) == unroll["terminated"].sum()


def test_minatar_episode_ends_match_an_independent_replay(breakout_unroll):
    """minatar's own gymnasium env, same seed and actions: x_{t+1} after an
    end is the next episode's first grid, the ended one's last in
    final_observations; rewards and terminals agree."""
    config, unroll = breakout_unroll
    for b in range(B):
        env = gym.make(ENV_ID)
        obs, _ = env.reset(seed=config.seed + b)
        np.testing.assert_array_equal(unroll["observations"][0, b], obs)
        for t in range(T):
            obs, reward, terminated, _, _ = env.step(
                int(unroll["actions"][t, b, 0]))
            assert unroll["rewards"][t, b] == reward
            assert unroll["terminated"][t, b] == terminated
            np.testing.assert_array_equal(unroll["final_observations"][t, b], obs)
            if terminated:
                obs, _ = env.reset()
            np.testing.assert_array_equal(unroll["observations"][t + 1, b], obs)
        env.close()


def test_grid_observations_get_the_minatar_network():
    observation_space, action_space = envs.env_spaces(ENV_ID)
    model = networks.build_network(observation_space, (3,))
    assert model.name == "grid_cnn"
    conv = model.get_layer("conv")
    assert conv.filters == 16 and tuple(conv.kernel_size) == (3, 3)
    assert model.get_layer("torso").units == 128
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert networks.build_network(frames, (6,)).name == "nature_cnn"


def test_every_preset_is_a_valid_config():
    for name, fields in PRESETS.items():
        assert Config(**fields).env_id == fields.get("env_id", "CartPole-v1"), name


def test_minatar_preset_trains_through_the_cli(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "train", "--preset",
         "minatar-breakout", "--out", str(out), "--no-progress",
         "--num-envs", "4", "--unroll-length", "10", "--total-env-steps", "200",
         "--policy-lag", "2", "--correction", "is1"],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["env_steps"] == 200 and summary["correction"] == "is1"
    config = json.loads((out / "config.json").read_text())
    # The preset's settings, with the flags given winning.
    assert config["env_id"] == ENV_ID and config["learning_rate"] == 1e-3
    assert config["num_envs"] == 4 and config["unroll_length"] == 10
    check = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "evaluate",
         str(out / "policy"), "--episodes", "2"],
        capture_output=True, text=True, timeout=600, env=env)
    assert check.returncode == 0, check.stderr[-3000:]
    assert json.loads(check.stdout.strip().splitlines()[-1])["episodes"] == 2
