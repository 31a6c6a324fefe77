"""Environments: gymnasium vector envs with same-step auto-reset.

`make_vector_env` steps `num_envs` copies in sync with
`AutoresetMode.SAME_STEP`: when an episode ends at step t, the observation
returned is already the next episode's first one and the finished episode's
last observation comes in ``info["final_obs"]``. That final observation is
what a time-limit truncation must bootstrap from.

Kinds of environment, chosen by id:

* any registered gymnasium env with a `Discrete` action space (CartPole-v1,
  Acrobot-v1, ...), one action head, or a 1-D `Box` with finite bounds
  (Pendulum-v1, HalfCheetah-v5, ...), a diagonal Gaussian policy
  (`tf_vtrace.agent.policies.DiagonalGaussian`);
* a user's env: ``module:EnvId-v0`` (gymnasium's own form: ``module`` is
  imported, then ``EnvId-v0`` looked up in the registry it filled) or
  ``module:ClassName`` (a `gymnasium.Env` subclass, made with no arguments).
  The id carries the module, so worker processes and Ray actors, each a
  fresh interpreter, import it themselves;
* ``tf_vtrace/CartPoleForce-v0`` (registered here): CartPole whose action is
  `MultiDiscrete([2, 3])`, a push direction and a force (½, 1 or 3⁄2 times
  CartPole's 10 N), two heads for `tf_vtrace.multi_from_logits`;
* ``tf_vtrace/StatelessCartPole-v0`` (registered here): CartPole observing
  only the cart position and the pole angle, a memory task (``Config.core
  = "lstm"``);
* ``ALE/...`` Atari games through ale-py (the `atari` extra) with the standard
  preprocessing: 30 no-op starts, frame skip 4 (max over the last two
  frames), 84×84 greyscale, a stack of the last 4 frames;
* ``MinAtar/...`` (Young & Tian 2019, the `minatar` extra): Breakout,
  SpaceInvaders, Freeway, Asterix, Seaquest on 10×10 grids with one channel
  per object kind. MinAtar registers its own gymnasium envs
  (``minatar.gym.register_envs``; ``-v1``: the minimal action set, ``-v0``:
  all 6 actions); their bool observations [10, 10, C] are given as float32
  0/1 here, the dtype the networks and the exported policy take.
"""

import functools
import importlib

import gymnasium as gym
import numpy as np

from tf_vtrace.agent._choices import VECTOR_ENVS
from tf_vtrace.agent._vector_envs import (
    NUMPY_VECTOR_ENV_IDS,
    CartPoleNumpyVectorEnv,
    EnvPoolVectorEnv,
    check_numpy_vector_env,
    import_envpool,
)

__all__ = ["CartPoleNumpyVectorEnv", "EnvPoolVectorEnv", "MULTI_DISCRETE_ID",
           "NUMPY_VECTOR_ENV_IDS", "STATELESS_CARTPOLE_ID", "VECTOR_ENVS",
           "check_action_space", "check_env_id", "check_envpool",
           "check_numpy_vector_env", "check_observation_space", "env_spaces",
           "action_policy", "head_sizes", "make_env", "make_vector_env", "to_env_actions"]

MULTI_DISCRETE_ID = "tf_vtrace/CartPoleForce-v0"
STATELESS_CARTPOLE_ID = "tf_vtrace/StatelessCartPole-v0"
ATARI_PREFIX = "ALE/"
MINATAR_PREFIX = "MinAtar/"
FORCE_SCALES = (0.5, 1.0, 1.5)


class CartPoleForce(gym.Wrapper):
    """CartPole-v1 with a two-head action: (direction, force level).

    Head 0 pushes left (0) or right (1) as in CartPole; head 1 picks the force,
    `FORCE_SCALES` times CartPole's own. Dynamics, rewards, termination and
    the 500-step time limit are CartPole's.
    """

    def __init__(self, env):
        super().__init__(env)
        self._base_force = env.unwrapped.force_mag
        self.action_space = gym.spaces.MultiDiscrete([2, len(FORCE_SCALES)])

    def step(self, action):
        direction, force = (int(a) for a in action)
        self.env.unwrapped.force_mag = self._base_force * FORCE_SCALES[force]
        return self.env.step(direction)


def _make_cartpole_force(**kwargs):
    return CartPoleForce(gym.make("CartPole-v1", **kwargs).unwrapped)


if MULTI_DISCRETE_ID not in gym.registry:
    gym.register(MULTI_DISCRETE_ID, entry_point=_make_cartpole_force,
                 max_episode_steps=500)


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole-v1 observing only the cart position and the pole angle (as
    RLlib's StatelessCartPole): the velocities must be inferred from the
    past, a task for a recurrent core."""

    KEPT = (0, 2)  # x, θ of CartPole's (x, ẋ, θ, θ̇)

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            space.low[list(self.KEPT)], space.high[list(self.KEPT)],
            dtype=space.dtype)

    def observation(self, observation):
        return observation[list(self.KEPT)]


def _make_stateless_cartpole(**kwargs):
    return StatelessCartPole(gym.make("CartPole-v1", **kwargs).unwrapped)


if STATELESS_CARTPOLE_ID not in gym.registry:
    gym.register(STATELESS_CARTPOLE_ID, entry_point=_make_stateless_cartpole,
                 max_episode_steps=500)


def _is_atari(env_id):
    return env_id.startswith(ATARI_PREFIX)


def _register_atari():
    try:
        import ale_py
    except ImportError as error:
        raise ImportError(
            "Atari ids (ALE/...) need ale-py: pip install 'tf-vtrace[atari]'."
        ) from error
    gym.register_envs(ale_py)


def _register_minatar():
    try:
        import minatar.gym
    except ImportError as error:
        raise ImportError(
            "MinAtar ids (MinAtar/...) need minatar: pip install "
            "'tf-vtrace[minatar]'.") from error
    if "MinAtar/Breakout-v1" not in gym.registry:
        minatar.gym.register_envs()


def _make_minatar(env_id, kwargs):
    _register_minatar()
    return gym.wrappers.DtypeObservation(gym.make(env_id, **kwargs), np.float32)


def _split_module(env_id):
    """``(module, name)`` of a ``module:name`` id, else ``(None, env_id)``."""
    module, colon, name = env_id.rpartition(":")
    return (module, name) if colon and module else (None, env_id)


def _import_env_module(env_id):
    """Imports the module of a ``module:name`` id (None without one), or
    raises a ValueError naming `Config.env_id`."""
    module, _ = _split_module(env_id)
    if module is None:
        return None
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ValueError(
            f"Config.env_id: cannot import {module!r}, the module of "
            f"{env_id!r} ({type(error).__name__}: {error}); is it installed "
            f"or on PYTHONPATH?") from None


def _env_class(env_id):
    """The `gymnasium.Env` subclass a ``module:ClassName`` id names, or None
    (any other id, ``module:EnvId-v0`` included)."""
    module = _import_env_module(env_id)
    name = _split_module(env_id)[1]
    if module is None or name in gym.registry:
        return None
    candidate = getattr(module, name, None)
    if isinstance(candidate, type) and issubclass(candidate, gym.Env):
        return candidate
    return None


def make_env(env_id, max_episode_steps=None):
    """One environment, with the Atari preprocessing for ``ALE/`` ids and
    float32 observations for ``MinAtar/`` ids.

    Args:
      env_id: A gymnasium id, ``module:EnvId-v0`` or ``module:ClassName``.
      max_episode_steps: Overrides the registered time limit (None: keep it).

    Returns:
      A `gymnasium.Env`.
    """
    kwargs = {} if max_episode_steps is None else {
        "max_episode_steps": max_episode_steps}
    if env_id.startswith(MINATAR_PREFIX):
        return _make_minatar(env_id, kwargs)
    env_class = _env_class(env_id)
    if env_class is not None:  # gym.make's wrappers, as for a registered id.
        return gym.make(gym.envs.registration.EnvSpec(
            id=env_id, entry_point=env_class), **kwargs)
    if not _is_atari(env_id):
        return gym.make(env_id, **kwargs)
    _register_atari()
    # Frame skipping is done by the preprocessing wrapper (max-pooled).
    env = gym.make(env_id, frameskip=1, **kwargs)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84,
                                          grayscale_obs=True, noop_max=30)
    return gym.wrappers.FrameStackObservation(env, 4)


@functools.cache
def env_spaces(env_id):
    """(observation_space, action_space) of `env_id`, from one env made once."""
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def head_sizes(action_space):
    """Number of actions per head: (n,) for Discrete, nvec for MultiDiscrete
    (a Box has no heads: see `action_policy`)."""
    check_action_space(action_space)
    if isinstance(action_space, gym.spaces.Box):
        raise ValueError(f"head_sizes: {_one_line(action_space)} has no action "
                         f"heads (a Gaussian policy: use action_policy).")
    if isinstance(action_space, gym.spaces.Discrete):
        return (int(action_space.n),)
    return tuple(int(n) for n in action_space.nvec)


def _one_line(space):
    return " ".join(str(space).split())


def action_policy(action_space):
    """The `tf_vtrace.agent.policies.ActionPolicy` the agent acts with in
    `action_space` (checked by `check_action_space`)."""
    check_action_space(action_space)
    # Imported here: `policies` needs TensorFlow, and the env checks that
    # `Config` runs (and the command line before its log level is set) do not.
    from tf_vtrace.agent import policies
    return policies.for_action_space(action_space)


def check_action_space(action_space):
    """Raises a ValueError naming `Config.env_id` unless the agent can act
    in `action_space`: one head per Discrete, or per MultiDiscrete entry, or
    a diagonal Gaussian over a 1-D Box with finite bounds. Refused: Box
    actions of rank 0 or ≥ 2, with an infinite bound, or of an integer
    dtype; MultiDiscrete of rank ≥ 2; MultiBinary, Tuple, Dict and others."""
    if isinstance(action_space, gym.spaces.Discrete) or (
            isinstance(action_space, gym.spaces.MultiDiscrete)
            and action_space.nvec.ndim == 1):
        return
    if (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
            and np.issubdtype(action_space.dtype, np.floating)
            and np.isfinite(action_space.low).all()
            and np.isfinite(action_space.high).all()):
        return
    raise ValueError(
        f"Config.env_id: the action space {_one_line(action_space)} is not "
        f"supported; supported: Discrete, 1-D MultiDiscrete and a 1-D float "
        f"Box with finite bounds.")


def check_observation_space(observation_space):
    """Raises a ValueError naming `Config.env_id` unless the networks take
    `observation_space` (a Box of at least one dimension)."""
    if (isinstance(observation_space, gym.spaces.Box)
            and len(observation_space.shape) >= 1):
        return
    raise ValueError(
        f"Config.env_id: the observation space "
        f"{_one_line(observation_space)} is not supported; supported: a Box "
        f"of rank >= 1 (rank 3: images or grids to a CNN, else flattened to "
        f"an MLP). gymnasium.wrappers.FlattenObservation turns Discrete, Tuple and "
        f"Dict observations into a Box.")


def check_env_id(env_id):
    """Raises a ValueError naming `Config.env_id` unless it can be trained:
    it names an env (registered, ``module:EnvId-v0`` or
    ``module:ClassName``) whose spaces the agent supports.

    Args:
      env_id: A gymnasium id, ``module:EnvId-v0`` or ``module:ClassName``.
    """
    if not isinstance(env_id, str):
        raise ValueError(f"Config.env_id must be a gymnasium id string, got "
                         f"{env_id!r}.")
    if _is_atari(env_id):
        _register_atari()
    if env_id.startswith(MINATAR_PREFIX):
        _register_minatar()
    if _env_class(env_id) is None:
        _check_registered(env_id)
    observation_space, action_space = env_spaces(env_id)
    check_action_space(action_space)
    check_observation_space(observation_space)


def _check_registered(env_id):
    module, name = _split_module(env_id)
    try:
        gym.spec(name)
    except gym.error.Error as error:
        what = ("is not a registered gymnasium environment" if module is None
                else f"is neither an env id that {module!r} registers nor a "
                     f"gymnasium.Env subclass in it")
        raise ValueError(f"Config.env_id: {env_id!r} {what} ({error}).") from None


def _action_layout(action_space):
    """What the policy's output depends on: the heads, or a Box's shape."""
    if isinstance(action_space, gym.spaces.Box):
        return tuple(action_space.shape)
    return head_sizes(action_space)


def check_envpool(env_id):
    """Raises a ValueError naming `Config.vector_env` unless EnvPool has
    `env_id` with gymnasium's observation and action spaces."""
    envpool = import_envpool()
    if env_id not in envpool.list_all_envs():
        raise ValueError(
            f"Config.vector_env: EnvPool has no env {env_id!r} (use "
            f"vector_env='gymnasium').")
    spec = envpool.make_spec(env_id)
    observation_space, action_space = env_spaces(env_id)
    theirs = spec.observation_space
    if (theirs.shape != observation_space.shape
            or theirs.dtype != observation_space.dtype
            or _action_layout(spec.action_space) != _action_layout(action_space)):
        raise ValueError(
            f"Config.vector_env: EnvPool's {env_id!r} has other spaces than "
            f"gymnasium's ({theirs}, {spec.action_space} vs "
            f"{observation_space}, {action_space}).")


def make_vector_env(env_id, num_envs, seed, max_episode_steps=None,
                    vector_env="gymnasium"):
    """`num_envs` copies of `env_id` stepped in sync, same-step auto-reset.

    Args:
      env_id: A gymnasium id (checked with `check_env_id` first).
      num_envs: B.
      seed: Env i is reset with seed + i (``"numpy"``: one generator for
        all envs, seeded with `seed`).
      max_episode_steps: Overrides the time limit (None: the env's own).
      vector_env: ``"gymnasium"`` (`gymnasium.vector.SyncVectorEnv`),
        ``"numpy"`` (`CartPoleNumpyVectorEnv`), ``"envpool"``
        (`EnvPoolVectorEnv`), all with the same contract; ``"auto"``:
        ``"numpy"`` for `NUMPY_VECTOR_ENV_IDS`, else ``"gymnasium"``.

    Returns:
      `(vector_env, first_observations)`.
    """
    if vector_env == "auto":
        vector_env = ("numpy" if env_id in NUMPY_VECTOR_ENV_IDS
                      else "gymnasium")
    if vector_env == "envpool":
        envs = EnvPoolVectorEnv(env_id, num_envs, seed, max_episode_steps)
        return envs, envs.reset()[0]
    if vector_env == "numpy":
        envs = CartPoleNumpyVectorEnv(env_id, num_envs, max_episode_steps)
        observations, _ = envs.reset(seed=seed)
        envs.action_space.seed(seed)
        return envs, observations
    envs = gym.vector.SyncVectorEnv(
        [functools.partial(make_env, env_id, max_episode_steps)] * num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    observations, _ = envs.reset(seed=seed)
    envs.action_space.seed(seed)
    return envs, observations


def to_env_actions(actions, action_space):
    """Actions [B, heads] int or [B, D] float → what the vector env's `step`
    takes (a Box's clipped to its bounds: `policies.DiagonalGaussian.to_env`)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return actions[:, 0]
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(actions, action_space.low, action_space.high)
    return actions
