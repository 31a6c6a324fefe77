"""Actors: step vector environments with a (lagged) copy of the policy.

The actor side is engine-neutral, so that other backends (processes, Ray) can
stand behind the same contract:

* weights travel as a list of numpy arrays (`keras.Model.get_weights()`),
  with the learner version that produced them;
* an unroll is a dict of numpy arrays, time-major, T steps of B envs:

  ====================== ================= =====================================
  key                    shape, dtype      meaning
  ====================== ================= =====================================
  ``observations``       [T+1, B, ...]     x_0 … x_T (x_T bootstraps)
  ``actions``            [T, B, H] int32   a_t, one column per action head
                         [T, B, D] f32     (a Box: the Gaussian's sample,
                                           not clipped to the bounds)
  ``behaviour_logits``   [T, B, P] f32     μ's parameters: the heads' logits
                                           concatenated (P = ΣA), or the
                                           Gaussian's (mean, log-std) pairs
                                           (P = 2·D)
  ``rewards``            [T, B] f32        r_t (clipped if configured)
  ``discounts``          [T, B] f32        γ, 0 where the episode terminated
  ``terminated``         [T, B] bool       the MDP ended (no bootstrap)
  ``truncated``          [T, B] bool       the time limit ended it (bootstrap)
  ``final_observations`` [T, B, ...]       x_{t+1} of the episode that ended
                                           at t (else equal to x_{t+1})
  ``truncation_values``  [T, B] f32        μ's V(final obs) where truncated
  ``policy_version``     [] int64          learner updates behind the weights
  ``episode_returns``    [n] f32           episodes finished in this unroll
  ``episode_lengths``    [n] int64
  ``initial_core_state`` [B, 2, S] f32     recurrent networks only (``Config.
                                           core``): each env's core state
                                           before step 0 (already zeroed
                                           where an episode starts there)
  ``discounted_returns`` [T, B] f32        with ``Config.scale_rewards``
                                           only: each env's R_t = γ R_{t−1}
                                           + r_t (raw rewards, R = 0 after
                                           an episode's end), whose running
                                           variance scales the rewards
  ====================== ================= =====================================

  The actions and behaviour parameters are those of the action space's
  `tf_vtrace.agent.policies.ActionPolicy`, the same code the learner reads
  them with; only the copy sent to the env is converted (`to_env`: a Box's
  actions clipped to its bounds).

  With same-step auto-reset, x_{t+1} after an episode end is the next
  episode's first observation; the ended episode's last one is in
  ``final_observations[t]``. A step that is both terminated and truncated
  counts as terminated.

`LocalActor` is the in-process backend.
"""

import abc

import numpy as np
import tensorflow as tf

from tf_vtrace import _dispatch
from tf_vtrace.agent import _recurrent, _running_statistics, networks, policies
from tf_vtrace.agent import envs as envs_lib

__all__ = ["ActorBackend", "LocalActor", "RETURNS_KEY", "UNROLL_KEYS",
           "actor_seed", "sample_actions"]

UNROLL_KEYS = (
    "observations", "actions", "behaviour_logits", "rewards", "discounts",
    "terminated", "truncated", "final_observations", "truncation_values",
    "policy_version", "episode_returns", "episode_lengths")
# The unroll key of the discounted returns (`Config.scale_rewards`).
RETURNS_KEY = _running_statistics.RETURNS_KEY


class ActorBackend(abc.ABC):
    """The contract between the training loop and whatever runs the actors.

    Attributes:
      prepare: The hook: None, or a function applied to each unroll before
        it is queued, returning the unroll to queue instead (the learner's
        `Learner.prepare`: its tensors made off the learner's thread). A
        backend that queues unrolls in the learner's process calls it
        (`tf_vtrace.agent.backends.ThreadActors`: while the learner is
        behind); the others return their unrolls as acted, which the
        learner takes as well. Set by `tf_vtrace.agent.backends.make_actors`.
    """

    prepare = None

    @abc.abstractmethod
    def set_weights(self, weights, version):
        """Act with `weights` (list of numpy arrays) of learner `version`."""

    @abc.abstractmethod
    def collect(self):
        """Returns the next unroll: a dict with `UNROLL_KEYS`."""

    def collect_queued(self):
        """The next unroll if one is ready now (acted and waiting for the
        learner), else None; never waits. None for a backend that acts on
        `collect` or does not queue for the learner."""
        return None

    def stop_acting(self, timeout_s):  # noqa: B027 (not abstract: the synchronous backend has nothing in flight)
        """Starts no more unrolls. Those already started (`pending`) can
        still be collected, for `timeout_s` seconds: after that `collect`
        raises instead of waiting for an actor that does not hand one in."""

    def pending(self):
        """Unrolls started (queued, in flight or being acted) that `collect`
        can still return; none for a backend that acts on `collect`."""
        return 0

    def close(self):  # noqa: B027 (not abstract: a backend without resources needs no close)
        """Releases the environments."""


def sample_actions(logits, head_sizes, rng):
    """Actions drawn from the policy's parameters, in NumPy: one per head
    from Categorical(logits) by the Gumbel-max trick, or a Gaussian's sample
    (`tf_vtrace.agent.policies.ActionPolicy.sample_numpy`).

    Args:
      logits: [B, P] numpy parameters (logits, heads concatenated).
      head_sizes: Actions per head, or an `ActionPolicy`.
      rng: A `numpy.random.Generator`.

    Returns:
      Actions [B, H] int32 (or [B, D] float32).
    """
    return policies.as_policy(head_sizes).sample_numpy(logits, rng)


class _EpisodeTracker:
    """Running return and length of each env's current episode."""

    def __init__(self, num_envs):
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self.finished_returns, self.finished_lengths = [], []

    def update(self, rewards, done):
        self.returns += rewards
        self.lengths += 1
        if not done.any():  # (most steps: skips four masked ops)
            return
        self.finished_returns += list(self.returns[done])
        self.finished_lengths += list(self.lengths[done])
        self.returns[done] = 0.
        self.lengths[done] = 0

    def pop(self):
        out = (np.asarray(self.finished_returns, np.float32),
               np.asarray(self.finished_lengths, np.int64))
        self.finished_returns, self.finished_lengths = [], []
        return out


def _final_observations(next_observations, info):
    """x_{t+1} with each ended episode's own last observation put back."""
    final = next_observations.copy()
    if "final_obs" in info:
        for i in np.flatnonzero(info["_final_obs"]):
            final[i] = info["final_obs"][i]
    return final


def actor_seed(config, seed_offset, start_update):
    """The seed of an actor's envs and action sampling.

    From the start of a run (`start_update` 0): ``config.seed +
    seed_offset``, env i reset with that + i. An actor started at a later
    update (a resumed run, a replaced actor) is seeded from the pair
    (``config.seed + seed_offset``, `start_update`), so a run resumed at
    update k continues the same way every time; its episodes start afresh
    (the ones in progress when the old process stopped are not in
    ``episodes.csv``).

    Examples:
      >>> from tf_vtrace.agent.config import Config
      >>> actor_seed(Config(seed=3), 4, 0)
      7
    """
    seed = config.seed + seed_offset
    if start_update == 0:
        return seed
    return int(np.random.SeedSequence([seed, start_update]).generate_state(1)[0])


def _concrete_policy(model, observation_space, jit_compile):
    """`model` as one traced function of a batch of observations.

    The concrete function, not the `tf.function`: calling the latter binds
    its arguments and looks up the trace on every call, which the actor's
    profile showed as ~40 % of a 64-unit MLP's call on 32 CartPole
    observations (docs/records/scaling.md).
    """
    signature = tf.TensorSpec((None,) + tuple(observation_space.shape),
                              observation_space.dtype)
    if _recurrent.is_recurrent(model):  # [observations, core state]
        signature = [signature, tf.TensorSpec(
            (None,) + _recurrent.core_state_shape(model), tf.float32)]
    return tf.function(model, autograph=False, jit_compile=jit_compile,
                       input_signature=[signature]).get_concrete_function()


def _weight_shapes(model):
    """`(path, shape)` of each of `model`'s weights, in `get_weights` order."""
    return [(v.path, tuple(v.shape)) for v in model.weights]


def _check_weights(weights, shapes):
    """Raises a ValueError unless `weights` are arrays of `shapes`
    (`_weight_shapes`)."""
    if len(weights) != len(shapes):
        raise ValueError(f"set_weights: expected {len(shapes)} arrays "
                         f"(the network's weights), got {len(weights)}.")
    for array, (path, shape) in zip(weights, shapes):
        if tuple(np.shape(array)) != shape:
            raise ValueError(f"set_weights: weight {path!r} has shape "
                             f"{shape}, got {tuple(np.shape(array))}.")


def _weights_setter(model):
    """A function `set_weights(weights)` for `model`: the arrays (`keras.
    Model.get_weights()` order) checked, raveled into one float32 vector and
    assigned in one compiled call with that one input, instead of Keras' `set_weights` (a
    conversion and an assign op per variable): in the ``"thread"`` backend
    the actor thread shares the interpreter lock with the learner, and the
    profile of the demo run put 17 % of the actor thread's time holding it
    in `set_weights` (docs/records/scaling.md).
    """
    variables = model.weights
    if any(v.dtype != "float32" for v in variables):
        return model.set_weights  # (no such network here yet)
    sizes = [int(np.prod(v.shape)) for v in variables]

    def assign(flat):
        for variable, part in zip(variables, tf.split(flat, sizes)):
            variable.assign(tf.reshape(part, variable.shape))

    concrete = tf.function(assign, autograph=False, input_signature=[
        tf.TensorSpec([sum(sizes)], tf.float32)]).get_concrete_function()

    shapes = _weight_shapes(model)

    def set_weights(weights):
        _check_weights(weights, shapes)
        flat = np.concatenate([np.ravel(w) for w in weights]).astype(np.float32, copy=False)
        _dispatch.call_concrete_unrecorded(concrete, [tf.constant(flat)])

    return set_weights


class LocalActor(ActorBackend):
    """Steps `config.num_envs` envs in this process, one batched policy call
    per step: NumPy for the feed-forward MLP (`Config.actor_inference`), else
    a compiled function.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      seed_offset: Added to `config.seed` (distinct actors, distinct seeds).
      start_update: The learner update the actor starts at (seeds, see
        `actor_seed`).
    """

    def __init__(self, config, seed_offset=0, start_update=0):
        seed = actor_seed(config, seed_offset, start_update)
        self.config = config
        self.envs, self._observations = envs_lib.make_vector_env(
            config.env_id, config.num_envs, seed, config.max_episode_steps,
            config.vector_env)
        observation_space, action_space = envs_lib.env_spaces(config.env_id)
        self.action_space = action_space
        self.action_policy = envs_lib.action_policy(action_space)
        self.head_sizes = getattr(self.action_policy, "head_sizes", None)
        self._model = networks.for_config(config, observation_space,
                                          self.action_policy)
        self.recurrent = _recurrent.is_recurrent(self._model)
        # Each env's core state, carried across steps and unrolls.
        self._core_state = (np.zeros(
            (config.num_envs,) + _recurrent.core_state_shape(self._model),
            np.float32) if self.recurrent else None)
        self._policy = _concrete_policy(self._model, observation_space,
                                        config.jit_compile)
        self._set_model_weights = _weights_setter(self._model)
        self._weight_shapes = _weight_shapes(self._model)
        # The MLP's step in NumPy: a TensorFlow call costs more than the
        # whole small network here (`networks.MLPForward`).
        self._numpy_policy = (
            networks.MLPForward(self._model)
            if config.actor_inference == "auto"
            and networks.MLPForward.is_mlp(self._model) else None)
        if self._numpy_policy is not None:
            self._numpy_policy.set_weights(self._model.get_weights())
        # Weights the NumPy policy acts with and the Keras model does not
        # hold yet: assigned when `model` is read, not at every update (the
        # assignment is a TensorFlow call, ~0.2 ms of the actor's GIL time).
        self._unassigned_weights = None
        self._rng = np.random.default_rng(seed)
        self._episodes = _EpisodeTracker(config.num_envs)
        # Each env's discounted return so far (`Config.scale_rewards`).
        self._returns = (np.zeros(config.num_envs, np.float64)
                         if config.scale_rewards else None)
        self.version = 0

    @property
    def model(self):
        """The Keras policy network, holding the weights acted with."""
        if self._unassigned_weights is not None:
            self._set_model_weights(self._unassigned_weights)
            self._unassigned_weights = None
        return self._model

    def set_weights(self, weights, version):
        if self._numpy_policy is not None:
            _check_weights(weights, self._weight_shapes)
            self._numpy_policy.set_weights(weights)
            self._unassigned_weights = weights
        else:
            self._set_model_weights(weights)
        self.version = int(version)

    def _logits(self, observations, core_state=None):
        """Numpy logits of an acting step (and the core state after it)."""
        if self._numpy_policy is not None:
            return self._numpy_policy.logits(observations), None
        logits, _, state = self._logits_and_values(observations, core_state)
        return logits, state

    def _logits_and_values(self, observations, core_state=None):
        """Numpy logits, values (and the core state after the step, for a
        recurrent network, from `core_state`)."""
        if self._numpy_policy is not None:
            logits, values = self._numpy_policy(observations)
            return logits, values, None
        # The flat call: the inputs match the traced signature by
        # construction (see `_dispatch.call_concrete_unrecorded`).
        inputs = [tf.constant(observations)]
        if not self.recurrent:
            logits, values = _dispatch.call_concrete_unrecorded(self._policy, inputs)
            return logits.numpy(), values.numpy(), None
        logits, values, state = _dispatch.call_concrete_unrecorded(
            self._policy, inputs + [tf.constant(core_state)])
        return logits.numpy(), values.numpy(), state.numpy()

    def collect(self):
        T = self.config.unroll_length
        buffers = self._empty_buffers(T)
        if self._returns is not None:
            buffers[RETURNS_KEY] = np.empty((T, self.config.num_envs), np.float32)
        initial_core_state = (None if self._core_state is None
                              else self._core_state.copy())
        for t in range(T):
            self._act(t, buffers)
        self._observations = buffers["observations"][T].copy()
        return self._unroll(buffers, initial_core_state)

    def _empty_buffers(self, T):
        """The arrays one unroll of `T` steps fills, by unroll key, with
        x_0 in place."""
        B, dtype = self.config.num_envs, self._observations.dtype
        observations = np.empty((T + 1,) + self._observations.shape, dtype)
        observations[0] = self._observations
        policy = self.action_policy
        return {
            "observations": observations,
            "final_observations": np.empty_like(observations[1:]),
            "behaviour_logits": np.empty((T, B, policy.param_size), np.float32),
            "actions": np.empty((T, B) + policy.action_shape,
                                policy.action_dtype),
            "rewards": np.zeros((T, B), np.float32),
            "truncation_values": np.zeros((T, B), np.float32),
            "terminated": np.zeros((T, B), bool),
            "truncated": np.zeros((T, B), bool),
        }

    def _act(self, t, buffers):
        """Step t: act on x_t, step the envs, fill row t of `buffers`."""
        observations, logits, actions, truncated = (buffers[key] for key in (
            "observations", "behaviour_logits", "actions", "truncated"))
        logits[t], state_after = self._logits(observations[t],
                                              self._core_state)
        actions[t] = self.action_policy.sample_numpy(logits[t], self._rng)
        next_obs, reward, term, trunc, info = self.envs.step(
            self.action_policy.to_env(actions[t]))
        self._episodes.update(reward, term | trunc)
        if self._returns is not None:
            self._returns = self._returns * self.config.discount + reward
            buffers[RETURNS_KEY][t] = self._returns
            self._returns[term | trunc] = 0.
        observations[t + 1] = next_obs
        buffers["final_observations"][t] = _final_observations(next_obs, info)
        buffers["rewards"][t], buffers["terminated"][t] = reward, term
        truncated[t] = trunc & ~term
        if truncated[t].any():
            # V of the ended episode's last observation, from the state of
            # that episode.
            _, final_values, _ = self._logits_and_values(
                buffers["final_observations"][t], state_after)
            buffers["truncation_values"][t] = np.where(truncated[t],
                                                       final_values, 0.)
        if self.recurrent:
            # The next observation starts a new episode where this one
            # ended: its state starts from zeros.
            self._core_state = state_after * ~(term | trunc)[:, None, None]

    def _unroll(self, buffers, initial_core_state):
        """The unroll dict (`UNROLL_KEYS`) of the filled `buffers`."""
        rewards, terminated = buffers["rewards"], buffers["terminated"]
        if self.config.reward_clip is not None:
            rewards = np.clip(rewards, -self.config.reward_clip,
                              self.config.reward_clip)
        episode_returns, episode_lengths = self._episodes.pop()
        unroll = {
            "observations": buffers["observations"],
            "actions": buffers["actions"],
            "behaviour_logits": buffers["behaviour_logits"],
            "rewards": rewards,
            "discounts": (self.config.discount * ~terminated).astype(np.float32),
            "terminated": terminated, "truncated": buffers["truncated"],
            "final_observations": buffers["final_observations"],
            "truncation_values": buffers["truncation_values"],
            "policy_version": np.int64(self.version),
            "episode_returns": episode_returns,
            "episode_lengths": episode_lengths,
        }
        if self.recurrent:
            unroll[_recurrent.CORE_STATE_KEY] = initial_core_state
        if self._returns is not None:
            unroll[RETURNS_KEY] = buffers[RETURNS_KEY]
        return unroll

    def close(self):
        self.envs.close()
