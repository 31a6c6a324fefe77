"""A minimal synchronous n-step actor-critic (A2C) on MinAtar, CleanRL style.

The control for the agent's MinAtar study (docs/records/minatar-sweep.md):
the same env (`tf_vtrace.agent.envs.make_vector_env`, sticky actions), the
same network (`tf_vtrace.agent.networks.grid_cnn`) and the same loss terms as
the agent's ``--correction none --backend local`` (policy gradient on
λ-returns, ½ squared value error, entropy bonus, each a mean over the T·B
steps), written as one loop read top to bottom with no queue, thread, lag or
V-trace: a result it shares with the agent is the settings', one it does not
is the pipeline's.

    python -m benchmarks.experiments.minatar_a2c --env MinAtar/Breakout-v1 \
        --total 1000000 --seed 0 --out /tmp/a2c.json
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tf_vtrace.agent import envs as envs_lib
from tf_vtrace.agent import networks


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--env", default="MinAtar/Breakout-v1")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--unroll", type=int, default=20)
    p.add_argument("--total", type=int, default=1_000_000)
    p.add_argument("--optimizer", choices=("adam", "rmsprop"), default="adam")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--anneal", type=int, default=1, help="1: lr decays linearly to 0")
    p.add_argument("--ent", type=float, default=0.01)
    p.add_argument("--vf", type=float, default=0.5)
    p.add_argument("--clip", type=float, default=0.5)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lam", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    return p.parse_args()


def returns_and_advantages(rewards, dones, values, last_value, gamma, lam):
    """GAE(λ): advantages and λ-returns [T, B] (λ = 1: n-step returns)."""
    T = len(rewards)
    advantages = np.zeros_like(rewards)
    gae = np.zeros_like(last_value)
    for t in reversed(range(T)):
        next_value = last_value if t == T - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        gae = delta + gamma * lam * not_done * gae
        advantages[t] = gae
    return advantages, advantages + values


def main():
    args = parse()
    tf.keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env, obs = envs_lib.make_vector_env(args.env, args.num_envs, args.seed)
    num_actions = int(env.single_action_space.n)
    model = networks.grid_cnn(env.single_observation_space.shape, (num_actions,),
                              seed=args.seed)
    updates = args.total // (args.num_envs * args.unroll)
    lr = (tf.keras.optimizers.schedules.PolynomialDecay(args.lr, updates, 0.0)
          if args.anneal else args.lr)
    optimizer = (tf.keras.optimizers.Adam(lr, epsilon=1e-5) if args.optimizer == "adam"
                 else tf.keras.optimizers.RMSprop(lr, rho=0.99, epsilon=0.01))

    @tf.function(jit_compile=True)
    def act(x):
        return model(x)

    @tf.function(jit_compile=True)
    def learn(x, actions, advantages, returns):
        with tf.GradientTape() as tape:
            logits, values = model(x, training=True)
            log_probs = tf.nn.log_softmax(logits)
            log_pi = tf.gather(log_probs, actions, batch_dims=1)
            entropy = -tf.reduce_sum(tf.exp(log_probs) * log_probs, -1)
            policy_loss = -tf.reduce_mean(log_pi * advantages)
            value_loss = 0.5 * tf.reduce_mean(tf.square(returns - values))
            loss = (policy_loss + args.vf * value_loss
                    - args.ent * tf.reduce_mean(entropy))
        grads = tape.gradient(loss, model.trainable_variables)
        grads, norm = tf.clip_by_global_norm(grads, args.clip)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return policy_loss, value_loss, tf.reduce_mean(entropy), norm

    T, B = args.unroll, args.num_envs
    episode_return = np.zeros(B)
    episodes, log = {"env_steps": [], "returns": []}, []
    start = time.time()
    for update in range(1, updates + 1):
        buf = {k: [] for k in ("obs", "actions", "rewards", "dones", "values")}
        for _ in range(T):
            logits, values = (a.numpy() for a in act(obs))
            gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, logits.shape)))
            actions = np.argmax(logits + gumbel, -1)
            next_obs, rewards, terminated, truncated, _ = env.step(actions)
            assert not truncated.any(), "MinAtar has no time limit"
            for k, v in zip(buf, (obs, actions, rewards, terminated, values)):
                buf[k].append(v)
            episode_return += rewards
            for b in np.flatnonzero(terminated):
                episodes["env_steps"].append(update * T * B)
                episodes["returns"].append(float(episode_return[b]))
                episode_return[b] = 0.0
            obs = next_obs
        last_value = act(obs)[1].numpy()
        arr = {k: np.asarray(v, np.float32) for k, v in buf.items()}
        advantages, returns = returns_and_advantages(
            arr["rewards"], arr["dones"], arr["values"], last_value, args.gamma, args.lam)
        out = learn(arr["obs"].reshape((T * B,) + obs.shape[1:]),
                    arr["actions"].astype(np.int32).reshape(-1),
                    advantages.reshape(-1), returns.reshape(-1))
        if update % 50 == 0 or update == updates:
            recent = episodes["returns"][-100:]
            log.append(dict(update=update, env_steps=update * T * B,
                            recent_return=float(np.mean(recent)) if recent else 0.0,
                            **dict(zip(("policy_loss", "value_loss", "entropy",
                                        "grad_norm"), (float(o) for o in out))),
                            adv_std=float(advantages.std()),
                            value_mean=float(arr["values"].mean()),
                            probs=np.bincount(arr["actions"].astype(int).ravel(),
                                              minlength=num_actions).tolist()))
            print(json.dumps(log[-1]), flush=True)
    steps, rets = np.asarray(episodes["env_steps"]), np.asarray(episodes["returns"])
    late = steps > 0.9 * updates * T * B
    record = dict(kind="a2c", args=vars(args), wall_s=round(time.time() - start, 1),
                  final_return=float(rets[late].mean()),
                  last100_return=float(rets[-100:].mean()), log=log, episodes=episodes)
    with open(args.out, "w") as handle:
        json.dump(record, handle)
    print("final", record["final_return"], "last100", record["last100_return"])


if __name__ == "__main__":
    main()
