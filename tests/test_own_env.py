"""A user's own env (tf_vtrace/agent/envs.py): ``module:EnvId-v0`` and
``module:ClassName`` ids, the space check naming what is supported, and the
command line training and evaluating a module's env in worker processes."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import envs
from tf_vtrace.agent.config import Config

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# A module of envs the agent cannot train, each refused by name.
UNSUPPORTED = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np

    class _Base(gym.Env):
        observation_space = gym.spaces.Box(-1., 1., (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0., True, False, {}

    class DictObservations(_Base):
        observation_space = gym.spaces.Dict(
            {"x": gym.spaces.Box(-1., 1., (3,), np.float32)})

    class ScalarObservations(_Base):
        observation_space = gym.spaces.Box(-1., 1., (), np.float32)

    class BoxActions(_Base):
        action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    class GridBoxActions(_Base):
        action_space = gym.spaces.Box(-1., 1., (2, 2), np.float32)

    class GridActions(_Base):
        action_space = gym.spaces.MultiDiscrete([[2, 2], [2, 2]])

    NOT_AN_ENV = 3
''')


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "unsupported_envs.py").write_text(UNSUPPORTED, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_a_module_env_id_imports_its_module_first(user_modules):
    config = Config(env_id="own_env:Corridor-v0")
    env = envs.make_env(config.env_id)
    assert env.spec.max_episode_steps == 50
    observation, _ = env.reset(seed=0)
    np.testing.assert_array_equal(observation, np.eye(7, dtype=np.float32)[0])


def test_a_module_class_id_makes_the_class_with_the_time_limit_given(user_modules):
    Config(env_id="own_env:Corridor")
    env = envs.make_env("own_env:Corridor", max_episode_steps=5)
    env.reset(seed=0)
    # Stepping left keeps the agent in cell 0: only the time limit ends it.
    ends = [env.step(0)[2:4] for _ in range(5)]
    assert ends == [(False, False)] * 4 + [(False, True)]
    vector_env, observations = envs.make_vector_env("own_env:Corridor", 3, seed=0,
                                                    max_episode_steps=5)
    assert observations.shape == (3, 7)
    vector_env.close()


@pytest.mark.parametrize("env_id, message", [
    ("unsupported_envs:DictObservations",
     r"the observation space Dict\(.*\) is not supported; supported: a Box of "
     r"rank >= 1 .*FlattenObservation"),
    ("unsupported_envs:ScalarObservations",
     r"the observation space Box\(.*\(\), float32\) is not supported"),
    ("unsupported_envs:BoxActions",
     r"the action space Box\(-inf, inf, \(2,\), float32\) is not supported; "
     r"supported: Discrete, 1-D MultiDiscrete and a 1-D float Box with finite "
     r"bounds"),
    ("unsupported_envs:GridBoxActions",
     r"the action space Box\(-1.0, 1.0, \(2, 2\), float32\) is not supported"),
    ("unsupported_envs:GridActions",
     r"the action space MultiDiscrete\(\[\[2 2\] \[2 2\]\]\) is not supported"),
    ("unsupported_envs:NOT_AN_ENV",
     r"'unsupported_envs:NOT_AN_ENV' is neither an env id that "
     r"'unsupported_envs' registers nor a gymnasium.Env subclass in it"),
    ("unsupported_envs:Missing-v0",
     r"'unsupported_envs:Missing-v0' is neither an env id that 'unsupported_envs'"),
    ("no_such_user_module:Env-v0",
     r"cannot import 'no_such_user_module', the module of "
     r"'no_such_user_module:Env-v0' \(ModuleNotFoundError.*PYTHONPATH"),
])
def test_what_cannot_be_trained_is_refused_naming_it(user_modules, env_id, message):
    with pytest.raises(ValueError, match=r"^Config\.env_id: " + message):
        Config(env_id=env_id)


def test_the_action_space_check_takes_the_supported_spaces():
    envs.check_action_space(gym.spaces.Discrete(3))
    envs.check_action_space(gym.spaces.MultiDiscrete([2, 3]))
    envs.check_action_space(gym.spaces.Box(-2., 2., (1,), np.float32))
    assert envs.head_sizes(gym.spaces.MultiDiscrete([2, 3])) == (2, 3)
    envs.check_observation_space(gym.spaces.Box(0, 255, (10, 10, 4), np.uint8))


def test_the_cli_trains_and_evaluates_a_module_env_in_worker_processes(tmp_path):
    """``--env own_env:Corridor-v0`` with the module on PYTHONPATH: the
    worker process and the evaluating process import it themselves."""
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]))
    out = tmp_path / "run"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "tf_vtrace.agent", *args],
                              capture_output=True, text=True, cwd=tmp_path,
                              timeout=SUBPROCESS_TIMEOUT_S, env=environ)

    trained = run("train", "--env", "own_env:Corridor-v0", "--out", str(out),
                  "--backend", "process", "--num-actors", "1", "--num-envs", "4",
                  "--unroll-length", "10", "--total-env-steps", "400",
                  "--no-progress")
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads(trained.stdout.splitlines()[-1])
    assert summary["env_id"] == "own_env:Corridor-v0" and summary["env_steps"] == 400
    assert summary["actor_restarts"] == 0
    evaluated = run("evaluate", str(out), "--episodes", "3")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    returns = json.loads(evaluated.stdout.splitlines()[-1])["returns"]
    # Every episode ends at the exit (≤ 0.75) or on the 50-step limit (−2.5).
    assert len(returns) == 3 and all(-2.5 - 1e-9 <= r <= 0.75 + 1e-9 for r in returns)
