"""Train `tf_vtrace.tf_agents.ImpalaAgent` on CartPole with TF-Agents' own tools.

A `DynamicStepDriver` runs the agent's collect policy in 8 CartPole-v1
environments and adds every step to a `TFUniformReplayBuffer` (the collect
policy records its logits in `policy_info`); the learner samples windows of
T + 1 steps with `as_dataset(num_steps=T + 1)`, some collected by older
weights than the learner's, which V-trace corrects for. The average return of
the last 20 finished training episodes is printed as it rises.

CartPole-v1 is gym 0.23's through `suite_gym`, with gym's own 500-step
`TimeLimit` stripped and TF-Agents' `TimeLimit` put in its place: TF-Agents'
limit keeps the discount (1.0), so the last step of a cut episode bootstraps
from the value of its final observation, whereas gym's limit would reach
TF-Agents as a termination (discount 0).

    python examples/tf_agents_cartpole.py            # 300 iterations, 48,000 steps
    python examples/tf_agents_cartpole.py --smoke    # a few iterations (tests)

TF-Agents needs Keras 2: the script sets TF_USE_LEGACY_KERAS=1 before
TensorFlow is imported.
"""
import argparse
import os
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gym
import tensorflow as tf
import tf_keras
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import (
    batched_py_environment,
    suite_gym,
    tf_py_environment,
)
from tf_agents.metrics import tf_metrics
from tf_agents.networks import (
    actor_distribution_network,
    value_network,
)
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.utils import common

from tf_vtrace.tf_agents import ImpalaAgent

NUM_ENVS, UNROLL, BATCH = 8, 20, 16     # T = UNROLL steps per window
TIME_LIMIT = 500
ITERATIONS = 300
LEARNING_RATE = 1e-3


def cartpole(num_envs):
    """num_envs CartPole-v1 in one batched TF environment."""
    return tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment([
            suite_gym.wrap_env(gym.make("CartPole-v1").unwrapped,
                               max_episode_steps=TIME_LIMIT)
            for _ in range(num_envs)]))


def build_agent(env):
    observation_spec, action_spec = env.observation_spec(), env.action_spec()
    return ImpalaAgent(
        env.time_step_spec(), action_spec,
        actor_distribution_network.ActorDistributionNetwork(
            observation_spec, action_spec, fc_layer_params=(64,)),
        value_network.ValueNetwork(observation_spec, fc_layer_params=(64,)),
        tf_keras.optimizers.Adam(LEARNING_RATE),
        discount_factor=0.99, reward_scale_factor=0.1, baseline_cost=0.5,
        entropy_cost=0.01,
        reduction="masked_mean", gradient_clipping=40.0,
        train_step_counter=tf.Variable(0, dtype=tf.int64))


def main(iterations=ITERATIONS, seed=0, report_every=20):
    """Trains; returns the list of (env steps, average return) reports."""
    tf.random.set_seed(seed)
    env = cartpole(NUM_ENVS)
    agent = build_agent(env)
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=NUM_ENVS, max_length=4 * UNROLL)
    average_return = tf_metrics.AverageReturnMetric(
        batch_size=NUM_ENVS, buffer_size=20)
    driver = dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy,
        observers=[replay_buffer.add_batch, average_return],
        num_steps=NUM_ENVS * UNROLL)
    collect = common.function(driver.run)
    train = common.function(agent.train)
    windows = iter(replay_buffer.as_dataset(
        sample_batch_size=BATCH, num_steps=UNROLL + 1,
        num_parallel_calls=1).prefetch(1))

    reports = []
    wall, cpu = time.perf_counter(), time.process_time()
    time_step, policy_state = None, None
    for iteration in range(1, iterations + 1):
        time_step, policy_state = collect(time_step, policy_state)
        for _ in range(2):  # learner steps per collection
            experience, _ = next(windows)
            loss_info = train(experience)
        if iteration % report_every == 0 or iteration == iterations:
            steps = iteration * NUM_ENVS * UNROLL
            reports.append((steps, float(average_return.result())))
            print(f"iteration {iteration:4d}  env steps {steps:6d}  "
                  f"average return {reports[-1][1]:6.1f}  "
                  f"loss {float(loss_info.loss):7.3f}  "
                  f"mean rho {float(loss_info.extra.mean_rho):.3f}  "
                  f"wall {time.perf_counter() - wall:5.0f} s  "
                  f"cpu {time.process_time() - cpu:5.0f} s", flush=True)
    return reports


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--smoke", action="store_true",
                        help="a few iterations: the pipeline, not the learning")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.smoke:
        main(iterations=3, seed=args.seed, report_every=1)
    else:
        main(iterations=args.iterations, seed=args.seed)
