"""Evaluate an exported policy (a SavedModel from `export_policy`).

Only `tf.saved_model.load` and gymnasium are used to act: what is evaluated is
exactly what was exported. Each of the `episodes` envs (seeds seed, seed + 1,
...) plays one full episode. A recurrent policy's core state starts at zeros
and is fed back at every step.
"""

import json
import os

import numpy as np
import tensorflow as tf

from tf_vtrace.agent import envs as envs_lib

__all__ = ["PolicyError", "evaluate"]


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
      PolicyError: `policy_path` is missing or not a readable policy.
    """
    policy, metadata = _load_policy(policy_path)
    env_id = env_id or metadata["env_id"]
    tf.random.set_seed(seed)
    vector_env, observations = envs_lib.make_vector_env(
        env_id, episodes, seed, metadata.get("max_episode_steps"))
    action_key = "greedy_action" if greedy else "sampled_action"
    returns = np.zeros(episodes)
    running = np.ones(episodes, bool)
    # A recurrent policy carries its core state (each env plays one episode
    # from zeros, so no reset is needed).
    state = ([np.zeros([episodes, *policy.core_state_shape.numpy()],
                       np.float32)]
             if hasattr(policy, "core_state_shape") else [])
    try:
        while running.any():
            out = policy.act(observations.astype(np.float32), *state)
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
