"""RLlib IMPALA on a gymnasium env, one JSON line per training iteration.

Runs in the RLlib venv (`make bench-agent` builds it from
benchmarks/peers/requirements-rllib.txt), never imports tf_vtrace:

    .venv-bench-rllib/bin/python benchmarks/peers/rllib_impala.py \
        --seed 0 --num-envs 32 --target 450 --max-env-steps 2000000

Settings are RLlib's tuned CartPole IMPALA example (train batch 500 per
learner, lr 5e-4, vf_loss_coeff 0.05, entropy 0, grad clip 40 by global
norm, shared value layers), with one env runner stepping `--num-envs` envs
and the learner in the driver process (a 2-core machine has no room for
more). Each line: seconds since `algo.build()` began, lifetime env steps
sampled, lifetime learner updates, the mean return of the last 100 episodes
(RLlib's own smoothing window), so the caller can stop the run at its target.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Keep Ray on loopback (read when ray is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _config(args):
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        IMPALAConfig()
        .environment(args.env)
        # Weights pushed to the env runner, as before RLlib 2.5x: with the
        # default pull-based state server (RLlib 2.60) and the learner in
        # the driver, the env runner sat in `ray.get` on the server and no
        # env step came in 30-65 s of training (3 runs here); without it,
        # 27k env steps in the first 40 s.
        .env_runners(num_env_runners=1, num_envs_per_env_runner=args.num_envs,
                     use_env_runner_state_server=False,
                     gym_env_vectorize_mode=args.vectorize_mode)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=500, lr=5e-4,
                  vf_loss_coeff=0.05, entropy_coeff=0.0, grad_clip=40.0,
                  grad_clip_by="global_norm")
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .reporting(metrics_num_episodes_for_smoothing=100)
        .debugging(seed=args.seed)
    )


def _get(result, *keys, default=None):
    for key in keys:
        if not isinstance(result, dict) or key not in result:
            return default
        result = result[key]
    return result


def _updates(result):
    """Lifetime learner updates of the default module (None before one)."""
    trained = _get(result, "learners", "default_policy",
                   "num_module_steps_trained_lifetime")
    batch = _get(result, "learners", "default_policy",
                 "module_train_batch_size_mean")
    return round(trained / batch) if trained and batch else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=32)
    # "vector_entry_point": gymnasium's NumPy-vectorized CartPole (the env
    # our demo steps), "sync": one Python env per copy (RLlib's default).
    parser.add_argument("--vectorize-mode", default="sync",
                        choices=["sync", "vector_entry_point"])
    parser.add_argument("--target", type=float, default=450.)
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--max-seconds", type=float, default=900.)
    args = parser.parse_args()

    import ray
    start = time.time()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = _config(args).build()
    build_s = time.time() - start
    try:
        while True:
            result = algo.train()
            line = {
                "wall_s": round(time.time() - start, 3),
                "build_s": round(build_s, 3),
                "env_steps": _get(result, "num_env_steps_sampled_lifetime",
                                  default=0),
                # One learner update per train batch (num_epochs 1, no
                # minibatches): updates = module steps trained / batch size.
                "learner_updates": _updates(result),
                "return_mean": _get(result, "env_runners",
                                    "episode_return_mean"),
                "episodes": _get(result, "env_runners",
                                 "num_episodes_lifetime"),
            }
            # (NumPy scalars: the NumPy-vectorized CartPole's rewards are
            # float32.)
            print(json.dumps(line, default=float), flush=True)
            done = (line["return_mean"] is not None
                    and line["return_mean"] >= args.target)
            if (done or line["env_steps"] >= args.max_env_steps
                    or line["wall_s"] >= args.max_seconds):
                break
    finally:
        algo.stop()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
