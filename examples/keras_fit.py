"""An IMPALA agent for CartPole-v1 trained by `model.fit(loss=ImpalaLoss())`.

An actor thread plays 16 CartPoles with the newest weights it was given and
puts each unroll of 20 steps, tagged with the version of those weights, in a
bounded queue; `fit` reads the queue as a `tf.data.Dataset` and takes one
RMSProp step per unroll on the V-trace loss. A callback hands the model's new
weights to the actor after every batch, another evaluates the greedy policy
(most likely action) after every epoch and keeps the best epoch's weights
(`keras.callbacks.EarlyStopping` with `restore_best_weights`, which are
evaluated again on 20 new episodes at the end), and `keras.callbacks.TensorBoard`
writes the loss, the `impala_metrics` and the actor's statistics (episode
return, policy lag, env steps). Hyperparameters are the project's own
pipeline's defaults (`tf_vtrace.agent.config.Config`, the optimizer from
`tf_vtrace.agent.learner.make_optimizer`): 500k env steps, RMSProp as in the
IMPALA paper at lr 8e-3 decayed linearly to 0, gradient norm clipped to 40,
entropy 0.01, baseline 0.5. Keras 3 (the actor is
`tf_vtrace.agent.actor.LocalActor`, a Keras 3 network). About 20 s on two
quiet CPU cores (docs/tutorials/keras.md#measured);
`--smoke` runs 6 updates of it (what `make test` checks):

    python examples/keras_fit.py --seed 0 --logdir runs/keras_fit
    tensorboard --logdir runs/keras_fit
"""
import argparse
import dataclasses
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from tf_vtrace.agent import envs, networks
from tf_vtrace.agent.actor import LocalActor
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.learner import make_optimizer
from tf_vtrace.keras import ImpalaLoss, impala_metrics
from tf_vtrace.keras_training import ActorThread, SyncWeights, UnrollModel


@dataclasses.dataclass
class Args:
    seed: int = 0
    total_env_steps: int = 500_000   # an upper bound: whole epochs only
    num_envs: int = 16               # B
    unroll_length: int = 20          # T
    learning_rate: float = 8e-3      # RMSProp's, decayed linearly to 0
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    max_grad_norm: float = 40.
    queue_capacity: int = 1          # unrolls waiting for fit
    sync_every: int = 1              # batches between weight hand-overs
    steps_per_epoch: int = 78        # updates per epoch (≈ 25k env steps)
    eval_episodes: int = 20
    logdir: str = None               # TensorBoard logs (None: none written)


def greedy_return(policy, env_id, episodes, seed=10_000):
    """Mean return of `episodes` episodes (one per env) acting by argmax."""
    vector_env, observations = envs.make_vector_env(env_id, episodes, seed)
    returns, running = np.zeros(episodes), np.ones(episodes, bool)
    while running.any():
        logits, _ = policy(observations.astype(np.float32))
        observations, rewards, terminated, truncated, _ = vector_env.step(
            np.argmax(logits.numpy(), axis=-1))
        returns += np.where(running, rewards, 0.)
        running &= ~(terminated | truncated)
    vector_env.close()
    return float(returns.mean())


class GreedyEvaluation(keras.callbacks.Callback):
    """Adds ``greedy_return`` to the epoch logs: the learning curve."""

    def __init__(self, network, env_id, episodes):
        super().__init__()
        self.policy = tf.function(network, autograph=False)  # traced once
        self.env_id, self.episodes = env_id, episodes

    def on_epoch_end(self, epoch, logs=None):
        logs["greedy_return"] = greedy_return(self.policy, self.env_id,
                                              self.episodes)


def build(args):
    """The actor, its network and the model `fit` trains (compiled)."""
    keras.utils.set_random_seed(args.seed)
    # The actor: B envs stepped in sync, actions sampled from its network.
    # The learner's optimizer reads the same Config: its step size decays
    # to 0 over `config.num_updates`, the updates of the whole epochs run.
    config = Config(num_envs=args.num_envs, unroll_length=args.unroll_length,
                    seed=args.seed, learning_rate=args.learning_rate,
                    total_env_steps=num_updates(args) * args.num_envs * args.unroll_length)
    actor = LocalActor(config)
    observation_space, action_space = envs.env_spaces(config.env_id)
    network = networks.build_network(observation_space,
                                     envs.head_sizes(action_space))
    actor.set_weights(network.get_weights(), version=0)

    # The learner: one RMSProp step per unroll, on the V-trace loss.
    model = UnrollModel(network)  # [B, T + 1, 4] → [B, T + 1, A + 1]
    loss = ImpalaLoss(baseline_cost=args.baseline_cost,
                      entropy_cost=args.entropy_cost, reduction="mean")
    model.compile(
        make_optimizer(config, global_clipnorm=args.max_grad_norm),
        loss=loss,
        metrics=impala_metrics(loss, ["mean_rho", "rho_clipped_fraction",
                                      "entropy", "baseline_loss"]))
    return actor, network, model


def num_updates(args):
    """Whole epochs of updates within `total_env_steps`, one per unroll."""
    epochs = (args.total_env_steps // (args.num_envs * args.unroll_length)
              // args.steps_per_epoch)
    return epochs * args.steps_per_epoch


def main(args=None):
    args = args or Args()
    actor, network, model = build(args)
    epochs = num_updates(args) // args.steps_per_epoch
    start = time.time()
    with ActorThread(actor, num_updates(args), args.queue_capacity) as actor_thread:
        callbacks = [
            SyncWeights(actor_thread, network, every=args.sync_every),
            GreedyEvaluation(network, actor.config.env_id, args.eval_episodes),
            # Keep the weights of the best greedy evaluation (it never stops:
            # patience is the whole run); Keras restores them at the end.
            keras.callbacks.EarlyStopping(
                "greedy_return", mode="max", patience=epochs,
                restore_best_weights=True)]
        if args.logdir:
            callbacks.append(keras.callbacks.TensorBoard(args.logdir))
        history = model.fit(actor_thread.dataset(), epochs=epochs,
                            steps_per_epoch=args.steps_per_epoch,
                            shuffle=False, callbacks=callbacks, verbose=2)
    curve = history.history
    wall_s = time.time() - start
    # The kept weights on episodes of other seeds than the ones they won on.
    result = dict(
        seed=args.seed, greedy_return=greedy_return(
            tf.function(network, autograph=False), actor.config.env_id,
            args.eval_episodes, seed=20_000),
        last_epoch_greedy_return=curve["greedy_return"][-1],
        best_epoch=int(np.argmax(curve["greedy_return"])) + 1,
        env_steps=int(curve["env_steps"][-1]), wall_s=round(wall_s, 1),
        env_steps_per_s=round(curve["env_steps"][-1] / wall_s),
        policy_lag=float(np.mean(curve["policy_lag"])),
        unused_unrolls=len(actor_thread.unused()),
        curve={k: curve[k] for k in ("env_steps", "greedy_return",
                                     "episode_return", "policy_lag")})
    print(f"greedy return over {args.eval_episodes} new episodes of the best "
          f"epoch's weights ({result['best_epoch']} of {epochs}; the last "
          f"epoch's: {result['last_epoch_greedy_return']:.1f}) after "
          f"{result['env_steps']} env steps: {result['greedy_return']:.1f} "
          f"({wall_s:.0f} s, {result['env_steps_per_s']} env steps/s, "
          f"mean policy lag {result['policy_lag']:.2f})")
    return result


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=Args.seed)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="2 epochs of 3 updates, 4 evaluation episodes")
    flags = parser.parse_args()
    if flags.smoke:
        return Args(seed=flags.seed, logdir=flags.logdir,
                    total_env_steps=6 * Args.num_envs * Args.unroll_length,
                    steps_per_epoch=3, eval_episodes=4)
    return Args(seed=flags.seed, logdir=flags.logdir)


if __name__ == "__main__":
    main(parse_args())
