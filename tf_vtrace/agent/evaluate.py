"""Greedy evaluation: of an exported policy, and during training.

`evaluate` loads a SavedModel from `export_policy`: only `tf.saved_model.load`
and gymnasium are used to act, so what is evaluated is exactly what was
exported. Each of the `episodes` envs (seeds seed, seed + 1, ...) plays one
full episode. A recurrent policy's core state starts at zeros and is fed
back at every step.

`TrainingEvaluation` evaluates the learner's current weights the same way
(the unsaved `tf_vtrace.export.policy_module`, the ``act`` an export would
have) every `Config.eval_every` env steps and keeps the best policy, as
SB3's ``EvalCallback`` and RLlib's ``evaluation_interval`` do: the sampled
training return lags behind the greedy policy and swings with it.
"""

import json
import numbers
import os
import shutil
import time

import numpy as np
import tensorflow as tf

from tf_vtrace import _dispatch, export
from tf_vtrace.agent import envs as envs_lib
from tf_vtrace.agent import policies, recording

__all__ = ["EVAL_SEED", "PolicyError", "TrainingEvaluation", "evaluate",
           "play_episodes"]

# The seed of the episodes `TrainingEvaluation` plays (env i: EVAL_SEED + i):
# the same episodes at every evaluation, neither the training envs' nor
# `evaluate`'s default (10_000 + i), so a kept best policy is then measured
# on episodes it was not selected on.
EVAL_SEED = 1_000_000


class PolicyError(ValueError):
    """The policy directory is missing or not a readable exported policy."""


def _load_policy(policy_path):
    """`(policy, metadata)` of the SavedModel at `policy_path`, or a
    `PolicyError` naming the path."""
    if not os.path.isdir(policy_path):
        raise PolicyError(f"{policy_path}: no such policy directory (a run "
                          f"writes its policy into RUN_DIR/policy).")
    try:
        policy = tf.saved_model.load(policy_path)
        metadata = json.loads(policy.metadata.numpy().decode())
        policy.act  # noqa: B018 - the exported signature must be there.
    except (tf.errors.OpError, OSError, ValueError, AttributeError,
            KeyError) as error:
        reason = (str(error).strip().splitlines() or [""])[0][:300]
        raise PolicyError(
            f"{policy_path}: not a readable policy exported by "
            f"tf_vtrace.export_policy ({type(error).__name__}: {reason})") from None
    return policy, metadata


def _check_env_fits(policy, policy_path, env_id, recorded):
    """Raises a `PolicyError` unless `env_id` can be made and gives the
    observations and takes the action heads of `policy`; `recorded`: the id
    is the one saved with the policy."""
    try:
        envs_lib.check_env_id(env_id)
    except ValueError as error:
        hint = (f"; it is the env recorded with the policy: pass env_id "
                f"(--env-id) naming its module, 'module:{env_id}'"
                if recorded else "")
        reason = str(error).removeprefix("Config.env_id: ").rstrip(".")
        raise PolicyError(f"{policy_path}: {reason}{hint}.") from None
    observation_space, action_space = envs_lib.env_spaces(env_id)
    takes = policy.act.get_concrete_function().structured_input_signature[0][0]
    acts = _action_layout(policy)
    env_acts = _action_layout(envs_lib.action_policy(action_space))
    if (not takes.shape[1:].is_compatible_with(observation_space.shape)
            or acts != env_acts):
        raise PolicyError(
            f"{policy_path}: the policy takes observations of shape "
            f"{tuple(takes.shape[1:])} and acts with {acts}; {env_id!r} "
            f"gives {observation_space.shape} and takes {env_acts}.")


def _action_layout(policy):
    """What a policy acts with, comparable between an exported policy and
    an `ActionPolicy`: ``heads (2, 3)`` or ``a Gaussian of D dimensions``."""
    if isinstance(policy, policies.ActionPolicy):
        gaussian = isinstance(policy, policies.DiagonalGaussian)
        sizes = (policy.param_size,) if gaussian else policy.head_sizes
    else:
        distribution = getattr(policy, "action_distribution", None)
        gaussian = (distribution is not None
                    and distribution.numpy().decode() == "gaussian")
        sizes = tuple(int(n) for n in policy.head_sizes.numpy())
    if gaussian:
        return f"a Gaussian of {sizes[0] // 2} dimensions"
    return f"heads {sizes}"


def check_episodes(episodes):
    """Raises ValueError unless `episodes` is an integer >= 1."""
    if (isinstance(episodes, bool) or not isinstance(episodes, numbers.Integral)
            or episodes < 1):
        raise ValueError(f"`episodes` must be an integer >= 1, got {episodes!r}.")


def evaluate(policy_path, episodes=20, greedy=True, seed=10_000, env_id=None):
    """Returns the returns of `episodes` episodes of the saved policy.

    Args:
      policy_path: The SavedModel directory.
      episodes: Number of episodes (one per env, played in parallel).
      greedy: Act with the most likely action per head; False: sample.
      seed: Env i is seeded seed + i; also seeds the sampling.
      env_id: Override the env id saved in the policy's metadata.

    Returns:
      A float64 numpy array of `episodes` returns.

    Raises:
      PolicyError: `policy_path` is missing or not a readable policy, or
        its env (`env_id`, else the recorded one) cannot be made or does
        not fit the policy.
      ValueError: `episodes` is not an integer >= 1.
    """
    check_episodes(episodes)  # Before the policy loads (seconds).
    policy, metadata = _load_policy(policy_path)
    _check_env_fits(policy, policy_path, env_id or metadata["env_id"],
                    recorded=env_id is None)
    tf.random.set_seed(seed)  # The sampled actions of `greedy=False`.
    return play_episodes(policy, env_id or metadata["env_id"], episodes,
                         greedy=greedy, seed=seed,
                         max_episode_steps=metadata.get("max_episode_steps"))


def play_episodes(policy, env_id, episodes, greedy=True, seed=10_000,
                  max_episode_steps=None):
    """The returns of `episodes` episodes, one per env, played in parallel.

    Args:
      policy: What `tf.saved_model.load` gives for an exported policy, or
        the unsaved `tf_vtrace.export.policy_module`: its ``act`` is called
        on a batch of observations (and the core state, when it has
        ``core_state_shape``).
      env_id: The gymnasium id.
      episodes: Number of episodes.
      greedy: Act with the most likely action per head; False: sample.
      seed: Env i is seeded seed + i.
      max_episode_steps: Override the env's time limit (None: its own).

    Returns:
      A float64 numpy array of `episodes` returns.

    Raises:
      ValueError: `episodes` is not an integer >= 1.
    """
    check_episodes(episodes)
    vector_env, observations = envs_lib.make_vector_env(
        env_id, episodes, seed, max_episode_steps)
    action_key = "greedy_action" if greedy else "sampled_action"
    returns = np.zeros(episodes)
    running = np.ones(episodes, bool)
    # A recurrent policy carries its core state (each env plays one episode
    # from zeros, so no reset is needed).
    state = ([np.zeros([episodes, *policy.core_state_shape.numpy()],
                       np.float32)]
             if hasattr(policy, "core_state_shape") else [])
    # The concrete function: a `tf.function` call binds its arguments and
    # looks up the trace each time (see `actor._concrete_policy`).
    act = policy.act.get_concrete_function()
    try:
        while running.any():
            out = _dispatch.call_concrete_unrecorded(act, [
                tf.constant(observations, tf.float32), *map(tf.convert_to_tensor, state)])
            actions = out[action_key]
            state = [out["core_state"]] if state else []
            observations, rewards, terminated, truncated, _ = vector_env.step(
                envs_lib.to_env_actions(actions.numpy(),
                                        vector_env.single_action_space))
            returns += np.where(running, rewards, 0.)
            running &= ~(terminated | truncated)
    finally:
        vector_env.close()
    return returns


class TrainingEvaluation:
    """Greedy evaluation during training, keeping the best policy.

    `due` says whether the update that just ended crossed a multiple of
    `Config.eval_every` env steps or was the run's last; `run` then plays
    `Config.eval_episodes` greedy episodes with the learner's current
    weights (envs seeded `EVAL_SEED` + i) and, when their mean return is at
    least the best so far, keeps a copy of the weights. Ties go to the later
    policy (on CartPole many evaluations reach the 500 cap; the later one
    has learned longer). `write_best` (the loop calls it with each
    checkpoint and at the end) exports a new best to ``policy_best/`` with
    ``best.json`` (env steps, update, mean return): one export per
    checkpoint at most, and the best on disk is never newer than the
    checkpoint beside it. The new best replaces the old one by renames, so
    a kill leaves one complete ``policy_best/``.

    Args:
      config: The run's `Config`.
      model: The learner's network (evaluated as it is at each `run`).
      head_sizes: Actions per head, or an `ActionPolicy`.
      out_dir: The run directory.
      resume_env_steps: None in a new run; else the env steps of the
        checkpoint the run resumes from. A ``policy_best/`` from after it
        (a killed process's, whose updates are done again) is removed.
    """

    def __init__(self, config, model, head_sizes, out_dir,
                 resume_env_steps=None):
        self.config = config
        metadata = {"env_id": config.env_id,
                    "max_episode_steps": config.max_episode_steps}
        self._export_arguments = policies.as_policy(head_sizes).export_arguments
        self._policy = export.policy_module(model, metadata=metadata,
                                            **self._export_arguments)
        self._model, self._metadata = model, metadata
        self.path = os.path.join(out_dir, "policy_best")
        self.best = None  # best.json's dict
        self._best_weights = None  # Of a best not written yet.
        self.last_return, self.seconds, self.count = None, 0., 0
        if resume_env_steps is not None:
            self._resume(out_dir, resume_env_steps)

    def _resume(self, out_dir, env_steps):
        """The best policy and the evaluations up to `env_steps`."""
        _recover(self.path)
        self.best = _read_best(self.path)
        if self.best and self.best["env_steps"] > env_steps:
            shutil.rmtree(self.path)
            self.best = None
        steps, means = recording.read_evaluations(
            os.path.join(out_dir, "evaluations.csv"))
        means = means[steps <= env_steps]
        self.count = len(means)
        self.last_return = float(means[-1]) if len(means) else None

    def due(self, env_steps, last):
        """Whether to evaluate after the update that ended at `env_steps`
        (`last`: the run's last update)."""
        every, steps = self.config.eval_every, self.config.steps_per_update
        return last or env_steps // every > (env_steps - steps) // every

    def run(self, env_steps, update):
        """Evaluates the current weights; returns the episodes' returns."""
        start = time.perf_counter()
        returns = play_episodes(self._policy, self.config.env_id,
                                self.config.eval_episodes, seed=EVAL_SEED,
                                max_episode_steps=self.config.max_episode_steps)
        self.last_return = float(returns.mean())
        if self.best is None or self.last_return >= self.best["greedy_return"]:
            self.best = {"env_steps": int(env_steps), "update": int(update),
                         "greedy_return": self.last_return}
            self._best_weights = self._model.get_weights()
        self.seconds += time.perf_counter() - start
        self.count += 1
        return returns

    def write_best(self):
        """Exports the best policy if it changed since the last call."""
        if self._best_weights is None:
            return
        start = time.perf_counter()
        tmp, old = self.path + ".tmp", self.path + ".old"
        shutil.rmtree(tmp, ignore_errors=True)
        current = self._model.get_weights()
        self._model.set_weights(self._best_weights)
        try:
            export.export_policy(self._model, tmp,
                                 metadata=dict(self._metadata, best=self.best),
                                 **self._export_arguments)
        finally:
            self._model.set_weights(current)
        with open(os.path.join(tmp, "best.json"), "w") as handle:
            json.dump(self.best, handle)
        if os.path.isdir(self.path):
            os.replace(self.path, old)
        os.replace(tmp, self.path)
        shutil.rmtree(old, ignore_errors=True)
        self._best_weights = None
        self.seconds += time.perf_counter() - start

    def summary(self):
        """The evaluation's part of ``summary.json`` (the whole run's, a
        resumed one's evaluations before the resume included; ``eval_s``:
        this process's time evaluating and exporting)."""
        best = self.best or {}
        return {"eval_greedy_last": self.last_return,
                "eval_greedy_best": best.get("greedy_return"),
                "eval_best_env_steps": best.get("env_steps"),
                "evaluations": self.count,
                "eval_s": round(self.seconds, 1)}


def _recover(path):
    """Completes a best-policy swap a kill interrupted: the old one back if
    the new one is not in place; a half-written new one removed."""
    shutil.rmtree(path + ".tmp", ignore_errors=True)
    if os.path.isdir(path + ".old"):
        if os.path.isdir(path):
            shutil.rmtree(path + ".old")
        else:
            os.replace(path + ".old", path)


def _read_best(path):
    """``best.json`` of the best policy at `path`, or None."""
    try:
        with open(os.path.join(path, "best.json")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
