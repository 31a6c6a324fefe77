"""Train a policy/value model on CartPole with `model.compile(loss=ImpalaLoss())`.

1. A behaviour policy (uniformly random) plays CartPole; its unrolls are packed
   with `tf_vtrace.keras.pack_targets` and the model is fit on them off-policy:
   the V-trace loss goes down.
2. A few IMPALA-style rounds: the actor acts with a copy of the model (so the
   learner is a little off-policy), the learner fits on each fresh batch, and
   the episode length goes up.

The environment is gymnasium's CartPole-v1 (rewards 1 per step, termination
at |x| > 2.4 or |θ| > 12°, truncation at 500 steps). Runs in under a minute on
two CPU cores; `--smoke` runs a few seconds' worth (what `make test` checks):

    python examples/keras_fit.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tf_vtrace.keras import ImpalaLoss, impala_metrics, keras, pack_targets  # noqa: E402

NUM_ENVS, UNROLL, NUM_ACTIONS, OBS_SIZE = 32, 20, 2, 4
DISCOUNT, TIME_LIMIT = 0.99, 500
ROUNDS = 30


class CartPole:
    """gymnasium's CartPole-v1, NUM_ENVS copies stepped in sync, auto-reset.

    Same-step auto-reset: a finished episode's final observation comes back
    in `info["final_obs"]` while `state` is already the next episode's start,
    which is what truncation needs (V of the final state, not of the reset).
    """

    def __init__(self, num_envs, seed):
        self.envs = gym.make_vec(
            "CartPole-v1", num_envs=num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        self.state, _ = self.envs.reset(seed=seed)
        self.steps = np.zeros(num_envs, int)
        self.finished = []  # lengths of finished episodes

    def step(self, actions):
        """Returns reward, terminated, truncated, the final observation."""
        self.state, reward, terminated, truncated, info = self.envs.step(actions)
        final = self.state.copy()
        done = terminated | truncated
        for i in np.flatnonzero(done):
            final[i] = info["final_obs"][i]
        self.steps += 1
        self.finished += list(self.steps[done])
        self.steps[done] = 0
        return reward, terminated, truncated, final


def build_model():
    """Observations [B, T + 1, 4] -> logits and value, packed [B, T + 1, 3]."""
    obs = keras.Input((None, OBS_SIZE))
    hidden = keras.layers.Dense(64, activation="tanh")(obs)
    hidden = keras.layers.Dense(64, activation="tanh")(hidden)
    logits = keras.layers.Dense(NUM_ACTIONS)(hidden)
    value = keras.layers.Dense(1)(hidden)
    return keras.Model(obs, keras.layers.Concatenate()([logits, value]))


def rollout(env, actor, rng):
    """One unroll per env: observations [B, T + 1], packed targets [B, T]."""
    obs, logits, actions, rewards, discounts = [env.state.copy()], [], [], [], []
    truncated, final_obs = [], []
    for _ in range(UNROLL):
        if actor is None:  # the uniformly random behaviour policy
            step_logits = np.zeros((NUM_ENVS, NUM_ACTIONS))
        else:
            step_logits = actor(obs[-1][:, None].astype(np.float32))[:, 0, :-1].numpy()
        probs = np.exp(step_logits - step_logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        action = (rng.random(NUM_ENVS) < probs[:, 1]).astype(int)
        reward, term, trunc, final = env.step(action)
        logits.append(step_logits)
        actions.append(action)
        rewards.append(reward)
        discounts.append(DISCOUNT * ~term)
        truncated.append(trunc)
        final_obs.append(final)
        obs.append(env.state.copy())
    swap = lambda x: np.swapaxes(np.asarray(x, np.float32), 0, 1)  # noqa: E731
    truncated, final_obs = swap(truncated), swap(final_obs)
    # V(x_{t+1}) of a time-limited episode's own final state: it bootstraps the
    # truncated step instead of the next episode's first observation.
    truncation_values = np.zeros_like(truncated)
    if truncated.any() and actor is not None:
        values = actor(final_obs)[..., -1].numpy()
        truncation_values = np.where(truncated > 0, values, 0.)
    targets = pack_targets(
        actions=swap(actions), rewards=swap(rewards), discounts=swap(discounts),
        behaviour_policy_logits=swap(logits), truncated=truncated,
        truncation_values=truncation_values)
    return swap(obs), targets


def main(epochs=15, rounds=ROUNDS):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = build_model()
    loss = ImpalaLoss(entropy_cost=0.01, reduction="mean")
    model.compile(keras.optimizers.Adam(3e-3), loss=loss,
                  metrics=impala_metrics(loss, ["baseline_loss", "mean_rho",
                                                "rho_clipped_fraction", "entropy"]))

    # 1. Off-policy: fit on unrolls of the random behaviour policy.
    env = CartPole(NUM_ENVS, seed=1)
    batches = [rollout(env, None, rng) for _ in range(8)]
    obs = np.concatenate([b[0] for b in batches])
    targets = tf.concat([b[1] for b in batches], axis=0)
    random_lengths = np.mean(env.finished)
    history = model.fit(obs, targets, batch_size=NUM_ENVS, epochs=epochs, verbose=0)
    losses = history.history["loss"]
    print(f"random behaviour: mean episode length {random_lengths:.1f}")
    print(f"V-trace loss on its unrolls: epoch 1 {losses[0]:.3f} -> "
          f"epoch {len(losses)} {losses[-1]:.3f}; mean rho "
          f"{history.history['mean_rho'][-1]:.2f}, clipped "
          f"{history.history['rho_clipped_fraction'][-1]:.0%}")

    # 2. IMPALA-style: act with a lagged copy of the model, learn on each batch.
    actor = build_model()
    env = CartPole(NUM_ENVS, seed=2)
    for round_ in range(rounds):
        if round_ % 4 == 0:  # the actor's weights lag the learner's
            actor.set_weights(model.get_weights())
        model.fit(*rollout(env, actor, rng), batch_size=NUM_ENVS, epochs=1,
                  verbose=0)
    lengths = env.finished[-50:]
    print(f"after {rounds} actor-learner rounds: mean episode length "
          f"{np.mean(lengths):.1f} (random: {random_lengths:.1f})")
    return losses, random_lengths, float(np.mean(lengths))


if __name__ == "__main__":
    import sys
    if "--smoke" in sys.argv:
        main(epochs=2, rounds=2)
    else:
        main()
