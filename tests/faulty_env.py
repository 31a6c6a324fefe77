"""CartPole-v1 made to fail in `step`, for the fault-injection tests.

Importing it registers ``FaultyEnv/Raising-v0`` and ``FaultyEnv/Hanging-v0``
with gymnasium; a CLI run in a subprocess (and its actor processes) imports
it from a ``sitecustomize.py`` on its PYTHONPATH (`sitecustomize_dir`). Each env instance fails
from its ``FAULTY_ENV_AT_STEP``-th step on (environment variable, default
100): the raising one raises a RuntimeError, the hanging one sleeps for an
hour (creating the file ``FAULTY_ENV_HUNG_MARK`` names first, if set).
"""
import os
import time

import gymnasium as gym

RAISING_ID = "FaultyEnv/Raising-v0"
HANGING_ID = "FaultyEnv/Hanging-v0"


class _Faulty(gym.Wrapper):

    def __init__(self, env, fault):
        super().__init__(env)
        self._fault = fault
        self._steps = 0
        self._at = int(os.environ.get("FAULTY_ENV_AT_STEP", "100"))

    def step(self, action):
        self._steps += 1
        if self._steps >= self._at:
            if self._fault == "raise":
                raise RuntimeError(f"injected env fault at step {self._steps}")
            mark = os.environ.get("FAULTY_ENV_HUNG_MARK")
            if mark:  # Says the hang has begun.
                open(mark, "a").close()
            time.sleep(3600)
        return self.env.step(action)


def _make(fault):
    def make(**kwargs):
        return _Faulty(gym.make("CartPole-v1", **kwargs).unwrapped, fault)
    return make


def sitecustomize_dir(directory):
    """Writes a ``sitecustomize.py`` importing this module into `directory`
    and returns the directory (to lead a subprocess's PYTHONPATH, with this
    module's directory after it)."""
    with open(os.path.join(directory, "sitecustomize.py"), "w") as handle:
        handle.write("import faulty_env  # noqa: F401\n")
    return directory


for _name, _fault in ((RAISING_ID, "raise"), (HANGING_ID, "hang")):
    if _name not in gym.registry:
        gym.register(_name, entry_point=_make(_fault), max_episode_steps=500)
