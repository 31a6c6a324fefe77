"""Train the IMPALA agent on your own gymnasium env: a corridor to walk.

From Python (registers ``Corridor-v0``, trains, prints the summary):

    python examples/own_env.py [TOTAL_ENV_STEPS]

From the command line, the module named in the id (gymnasium's
``module:EnvId-v0`` form) is imported by every process that makes the env:

    export PYTHONPATH=examples
    python -m tf_vtrace.agent train --env own_env:Corridor-v0 --out runs/corridor
    python -m tf_vtrace.agent evaluate runs/corridor

docs/howto/own-env.md explains each step.
"""

import sys

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Cells 0 … LENGTH − 1; start in cell 0, the exit is the last cell.

    Actions: 0 steps left, 1 steps right. Reward: −0.05 a step, +1 on
    reaching the exit (the episode ends there). Observation: the cell,
    one-hot. The best return is 1 − 0.05 · (LENGTH − 2) = 0.75.
    """

    LENGTH = 7

    def __init__(self):
        self.observation_space = gym.spaces.Box(0., 1., (self.LENGTH,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cell = 0

    def _observation(self):
        return np.eye(self.LENGTH, dtype=np.float32)[self._cell]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell = 0
        return self._observation(), {}

    def step(self, action):
        self._cell = min(max(self._cell + (1 if action == 1 else -1), 0),
                         self.LENGTH - 1)
        at_exit = self._cell == self.LENGTH - 1
        return self._observation(), 1. if at_exit else -0.05, at_exit, False, {}


# At import, so that whoever imports this module (a worker process, a Ray
# actor, `--env own_env:Corridor-v0`) finds the id. The time limit makes a
# walk that never reaches the exit end (truncated) after 50 steps.
gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=50)


def main(total_env_steps=30_000, out_dir="runs/corridor"):
    """Trains on Corridor-v0 and returns the run's summary."""
    from tf_vtrace.agent.config import Config
    from tf_vtrace.agent.train import train

    config = Config(env_id="Corridor-v0", num_envs=8, unroll_length=10,
                    total_env_steps=total_env_steps, learning_rate=2e-2)
    summary = train(config, out_dir, restart=True, progress=False)
    print(f"{summary['env_steps']} env steps: mean return of the last "
          f"episodes {summary['mean_return_last_100']:.2f} (best 0.75)")
    return summary


# The guard: worker processes (backend="process") re-import this file.
if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
