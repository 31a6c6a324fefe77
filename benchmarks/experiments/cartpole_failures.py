"""How exported CartPole policies end their episodes: the late collapse.

Some CartPole-v1 runs of the default configuration reach a training return
of 475 and then fall back to 150–300 (docs/records/agent.md). This plays each given
policy (a run's ``policy/`` or ``policy_best/``) for `--episodes` episodes of
gymnasium's own CartPole-v1, greedy and sampled, and counts how each ended:

- ``truncated``: the 500-step time limit (the best possible episode);
- ``cart``: the cart left the track, |x| > ``x_threshold`` (2.4);
- ``pole``: the pole fell, |θ| > ``theta_threshold_radians`` (12°).

Next to the counts: the mean length and the mean cart position x over each
episode, averaged over the episodes (its sign says which way the cart
drifts). Prints one JSON line per policy and mode.

    python -m benchmarks.experiments.cartpole_failures runs/demo/policy \
        runs/demo/policy_best --episodes 20
"""

import argparse
import collections
import json
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _end(env, observation, truncated):
    """Why the episode that ended at `observation` ended."""
    if truncated:
        return "truncated"
    cartpole = env.unwrapped
    return ("cart" if abs(observation[0]) > cartpole.x_threshold else "pole")


def play(act, greedy, episodes, seed):
    """`(ends, lengths, mean_x)` of `episodes` episodes, env i seeded seed + i."""
    import gymnasium as gym
    import tensorflow as tf
    key = "greedy_action" if greedy else "sampled_action"
    env = gym.make("CartPole-v1")
    ends, lengths, mean_x = [], [], []
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            positions = []
            while True:
                action = act(tf.constant(observation[None], tf.float32))[key]
                observation, _, terminated, truncated, _ = env.step(
                    int(action.numpy().reshape(-1)[0]))
                positions.append(observation[0])
                if terminated or truncated:
                    break
            ends.append(_end(env, observation, truncated))
            lengths.append(len(positions))
            mean_x.append(float(np.mean(positions)))
    finally:
        env.close()
    return ends, lengths, mean_x


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("policies", nargs="+",
                        help="exported policy directories (RUN_DIR/policy)")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=10_000,
                        help="env i is seeded seed + i (evaluate's default)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    import tensorflow as tf
    for path in args.policies:
        # The loaded module owns the variables: it must outlive `act`.
        policy = tf.saved_model.load(path)
        act = policy.act.get_concrete_function()
        for greedy in (True, False):
            ends, lengths, mean_x = play(act, greedy, args.episodes, args.seed)
            print(json.dumps({
                "policy": path, "greedy": greedy,
                "ends": dict(collections.Counter(ends)),
                "mean_length": round(float(np.mean(lengths)), 1),
                "mean_x": round(float(np.mean(mean_x)), 3),
                "mean_x_range": [round(min(mean_x), 3), round(max(mean_x), 3)]}))


if __name__ == "__main__":
    main()
