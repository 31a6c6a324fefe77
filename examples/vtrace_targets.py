"""V-trace targets for a real batch of CartPole-v1 experience.

A uniform-random behaviour policy μ acts in 16 CartPole environments for 64
steps. We then ask: what are the value targets vs and policy-gradient
advantages for a different target policy π (a hand-written "push the way the
pole falls" softmax)? V-trace answers from μ's data alone, correcting with the
clipped importance ratios ρ_t = π(a_t|x_t) / μ(a_t|x_t).

Run: `make demo` (or `.venv/bin/python examples/vtrace_targets.py`).
"""
import gymnasium as gym
import numpy as np
import tensorflow as tf

import tf_vtrace

NUM_ENVS, UNROLL_LENGTH, GAMMA = 16, 64, 0.99


def target_policy_logits(observations):
    """π: push the way the pole leans or falls, with logit gap 3."""
    lean = np.sign(observations[..., 2] + 0.5 * observations[..., 3])
    return np.stack([-1.5 * lean, 1.5 * lean], axis=-1).astype(np.float32)


def value_estimate(observations):
    """A crude V(x): more reward to come the more upright the pole."""
    upright = 1.0 - np.abs(observations[..., 2]) / 0.21
    return (20.0 * upright).astype(np.float32)


def collect_unroll(seed=0):
    """Time-major [T, B] arrays of μ's experience, plus the last observation."""
    envs = [gym.make("CartPole-v1") for _ in range(NUM_ENVS)]
    observation = np.stack([env.reset(seed=seed + i)[0]
                            for i, env in enumerate(envs)])
    rng = np.random.default_rng(seed)
    steps = {k: [] for k in ("observations", "actions", "rewards", "discounts")}
    for _ in range(UNROLL_LENGTH):
        actions = rng.integers(0, 2, size=NUM_ENVS)
        steps["observations"].append(observation)
        steps["actions"].append(actions)
        next_observation, rewards, discounts = [], [], []
        for env, action in zip(envs, actions):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            # An ended episode zeroes the discount (CartPole's 500-step time
            # limit is never reached by a random policy in 64 steps), and the
            # reset starts a new one in the same column.
            done = terminated or truncated
            discounts.append(0.0 if done else GAMMA)
            rewards.append(reward)
            next_observation.append(env.reset()[0] if done else obs)
        steps["rewards"].append(rewards)
        steps["discounts"].append(discounts)
        observation = np.stack(next_observation)
    batch = {k: np.asarray(v, np.int32 if k == "actions" else np.float32)
             for k, v in steps.items()}
    return batch, observation


def main():
    batch, last_observation = collect_unroll()
    observations = batch["observations"]
    uniform_logits = np.zeros(observations.shape[:2] + (2,), np.float32)
    out = tf_vtrace.from_logits(
        behaviour_policy_logits=uniform_logits,
        target_policy_logits=target_policy_logits(observations),
        actions=batch["actions"],
        discounts=batch["discounts"],
        rewards=batch["rewards"],
        values=value_estimate(observations),
        bootstrap_value=value_estimate(last_observation),
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0)

    rhos = tf.exp(out.log_rhos).numpy()
    episode_ends = int((batch["discounts"] == 0).sum())
    print(f"batch: T={UNROLL_LENGTH}, B={NUM_ENVS}, {episode_ends} episode ends")
    print(f"importance ratios ρ: min {rhos.min():.3f}, max {rhos.max():.3f}, "
          f"clipped at ρ̄=1: {np.mean(rhos > 1.0):.0%}")
    print(f"mean V(x_t) {value_estimate(observations).mean():7.3f}")
    print(f"mean vs_t   {out.vs.numpy().mean():7.3f}")
    agrees = batch["actions"] == np.argmax(target_policy_logits(observations), -1)
    pg = out.pg_advantages.numpy()
    print(f"mean pg advantage where μ's action is π's choice: {pg[agrees].mean():+.3f}; "
          f"where it is not: {pg[~agrees].mean():+.3f}")


if __name__ == "__main__":
    main()
