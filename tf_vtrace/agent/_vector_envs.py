"""The vector envs other than gymnasium's `SyncVectorEnv`, with its
same-step auto-reset contract (`tf_vtrace.agent.envs.make_vector_env`):
gymnasium's NumPy-vectorized CartPole and EnvPool's C++ envs."""

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import cartpole as gym_cartpole

# The ids whose NumPy-vectorized implementation gymnasium registers
# (`vector_entry_point`) and `CartPoleNumpyVectorEnv` adapts.
NUMPY_VECTOR_ENV_IDS = ("CartPole-v0", "CartPole-v1")


class CartPoleNumpyVectorEnv(gym_cartpole.CartPoleVectorEnv):
    """gymnasium's NumPy-vectorized CartPole with same-step auto-reset.

    gymnasium registers, next to CartPole's one-env class, `CartPoleVectorEnv`:
    the same physics on arrays [4, B] in one NumPy step for all B envs (tens
    of µs where `SyncVectorEnv` of B `CartPoleEnv`s takes ~10 µs per env).
    It resets an env on the step *after* its episode ended
    (`AutoresetMode.NEXT_STEP`). This subclass keeps its spaces, state,
    reset and generator and steps them itself (`_cartpole_euler_step`:
    gymnasium's expressions, without its per-step action-space check and
    deferred-reset masking: 47 → 34 µs a step on 16 envs): the ended envs are
    reset at once, as the parent's next step would reset them (new states
    uniform in [low, high] from its generator, step counts 0), so that `step`
    returns what `SyncVectorEnv` with `AutoresetMode.SAME_STEP` does: the
    next episode's first observation, the ended one's last in
    ``info["final_obs"]`` (mask ``info["_final_obs"]``). Rewards come as
    float64, as `SyncVectorEnv`'s.

    Stepping and resetting read and write the parent's arrays (``state``,
    ``steps``) and constants: gymnasium internals, pinned by
    constraints.txt; tests/test_vector_envs.py checks every transition
    against gymnasium's `CartPoleEnv` stepped from the same state.

    Args:
      env_id: One of `NUMPY_VECTOR_ENV_IDS`.
      num_envs: B.
      max_episode_steps: The time limit (None: the id's own, 500 or 200).
    """

    def __init__(self, env_id, num_envs, max_episode_steps=None):
        check_numpy_vector_env(env_id)
        super().__init__(
            num_envs=num_envs,
            max_episode_steps=(max_episode_steps
                               or gym.spec(env_id).max_episode_steps))

    def step(self, actions):
        actions = np.asarray(actions)
        if (actions.shape != (self.num_envs,) or actions.dtype.kind not in "iu"
                or (actions & ~1).any()):
            raise ValueError(f"CartPoleNumpyVectorEnv.step: actions must be "
                             f"{self.num_envs} integers in {{0, 1}}, got "
                             f"{actions!r}.")
        self.state = _cartpole_euler_step(self, self.state, actions)
        x, theta = self.state[0], self.state[2]
        terminated = ((x < -self.x_threshold) | (x > self.x_threshold)
                      | (theta < -self.theta_threshold_radians)
                      | (theta > self.theta_threshold_radians))
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        observations = self.state.T.astype(np.float32)
        done = terminated | truncated
        info = {}
        if done.any():  # The same-step reset, as the parent's next step would.
            info = {"final_obs": observations, "_final_obs": done}
            self.state[:, done] = self.np_random.uniform(
                low=self.low, high=self.high, size=(4, int(done.sum())))
            self.steps[done] = 0
            observations = self.state.T.astype(np.float32)
        return (observations, np.ones(self.num_envs), terminated, truncated,
                info)


def _cartpole_euler_step(env, state, actions):
    """CartPole's dynamics (Barto, Sutton & Anderson 1983, as corrected by
    Florian 2005), one explicit Euler step of all envs: `state` [4, B]
    float64 (x, ẋ, θ, θ̇), actions [B] in {0, 1} (push left, right).

    The expressions and their order are gymnasium's `CartPoleEnv.step`, so
    the result is the same to the bit (tests/test_vector_envs.py); written
    here because gymnasium's own vector step also checks the action space
    and masks the next step's resets (`CartPoleNumpyVectorEnv`).
    """
    x, x_dot, theta, theta_dot = state
    force = np.where(actions == 1, env.force_mag, -env.force_mag)
    costheta, sintheta = np.cos(theta), np.sin(theta)
    temp = (force + env.polemass_length * np.square(theta_dot) * sintheta
            ) / env.total_mass
    thetaacc = (env.gravity * sintheta - costheta * temp) / (
        env.length * (4.0 / 3.0 - env.masspole * np.square(costheta)
                      / env.total_mass))
    xacc = temp - env.polemass_length * thetaacc * costheta / env.total_mass
    return np.stack((x + env.tau * x_dot, x_dot + env.tau * xacc,
                     theta + env.tau * theta_dot,
                     theta_dot + env.tau * thetaacc))


def check_numpy_vector_env(env_id):
    """Raises a ValueError naming `Config.vector_env` unless `env_id` has a
    NumPy vector implementation here (`NUMPY_VECTOR_ENV_IDS`)."""
    if env_id not in NUMPY_VECTOR_ENV_IDS:
        raise ValueError(
            f"Config.vector_env: no NumPy-vectorized {env_id!r} (gymnasium's "
            f"are adapted for {', '.join(NUMPY_VECTOR_ENV_IDS)}); use "
            f"vector_env='gymnasium' or 'auto'.")


class EnvPoolVectorEnv:
    """EnvPool's C++ vector env behind gymnasium's same-step auto-reset.

    EnvPool resets an env on the step *after* its episode ended (that step
    ignores the action and returns the first observation with reward 0).
    Here the ended envs are stepped again at once, alone (EnvPool's
    ``step(actions, env_id)``), so that `step` returns what a gymnasium
    vector env with `AutoresetMode.SAME_STEP` does: the next episode's
    first observation, the ended one's last in ``info["final_obs"]`` (with
    the mask ``info["_final_obs"]``); the reset step's reward 0 is not a
    step of either episode and is dropped.

    One difference remains: an episode that terminates on the time limit's
    step is reported truncated only (EnvPool's own convention: its
    ``elapsed_step`` reaching the limit wins; gymnasium's TimeLimit reports
    both, and the unroll contract counts that as terminated), so that step
    bootstraps from V of its final observation. Rare (CartPole: a fall on
    exactly step 500), and measured in tests/test_envpool.py.

    Args:
      env_id: An id that EnvPool and gymnasium both know (`check_envpool`).
      num_envs: B.
      seed: Env i is seeded with seed + i (EnvPool's convention).
      max_episode_steps: Overrides the time limit (None: the env's own).
    """

    def __init__(self, env_id, num_envs, seed, max_episode_steps=None):
        envpool = import_envpool()
        kwargs = {} if max_episode_steps is None else {
            "max_episode_steps": max_episode_steps}
        self._pool = envpool.make(env_id, env_type="gymnasium",
                                  num_envs=num_envs, seed=seed, **kwargs)
        self._noop = np.zeros(num_envs, np.int32)

    def reset(self, seed=None):
        """First observations (EnvPool seeds at `make`: `seed` is ignored)."""
        observations, _ = self._pool.reset()
        return observations, {}

    def step(self, actions):
        observations, rewards, terminated, truncated, _ = self._pool.step(
            np.asarray(actions))
        done = terminated | truncated
        info = {}
        if done.any():
            ended = np.flatnonzero(done).astype(np.int32)
            info = {"final_obs": observations.copy(), "_final_obs": done}
            first, *_, reset_info = self._pool.step(self._noop[:ended.size],
                                                    ended)
            observations = observations.copy()
            observations[reset_info["env_id"]] = first
        return observations, rewards.astype(np.float64), terminated, truncated, info

    def close(self):
        self._pool.close()


def import_envpool():
    try:
        import envpool
    except ImportError as error:
        raise ImportError(
            "Config.vector_env='envpool' needs EnvPool: pip install "
            "'tf-vtrace[envpool]'.") from error
    return envpool
