"""One run of the MinAtar settings sweep (docs/records/minatar-sweep.md).

The agent's own actor and learner in the synchronous loop (``backend
"local"``: lag 0, one process, one core), on a MinAtar preset with
`Config` fields overridden; writes one JSON record per run: the settings,
every finished episode (env steps, return), the learner's diagnostics
averaged over 20 equal blocks of updates, and the final training returns
(mean of the episodes in the last 10 % of env steps, and of the last 100
episodes). ``summarize`` tabulates a directory of records per point with
95 % bootstrap bands over seeds.

    python -m benchmarks.experiments.minatar_sweep run --game breakout \
        --point adam-lr1e-3 --seed 0 learning_rate=1e-3
    python -m benchmarks.experiments.minatar_sweep summarize
"""

import argparse
import ast
import collections
import json
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "minatar_sweep"
FINAL_FRACTION = 0.1
BLOCKS = 20
DIAGNOSTICS = ("entropy", "gradient_norm", "policy_loss", "baseline_loss",
               "entropy_loss", "kl", "rho_clipped_fraction")


def _value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def make_config(game, seed, total, overrides):
    from tf_vtrace.agent.config import Config
    from tf_vtrace.agent.presets import PRESETS
    settings = dict(PRESETS["minatar-breakout"], env_id=f"MinAtar/{game}-v1",
                    total_env_steps=total, seed=seed, backend="local")
    settings.update(overrides)
    return Config(**settings)


def _mean_probs(logits):
    """The behaviour policy's action probabilities, averaged over the unroll
    (one head): which actions the policy still explores."""
    logits = logits - logits.max(-1, keepdims=True)
    probs = np.exp(logits)
    return (probs / probs.sum(-1, keepdims=True)).reshape(-1, logits.shape[-1]).mean(0)


def train_run(config):
    """Episodes and block-averaged diagnostics of one synchronous run."""
    from tf_vtrace.agent import backends, policy_lag
    from tf_vtrace.agent import envs as envs_lib
    from tf_vtrace.agent import learner as learner_lib
    from tf_vtrace.agent.train import actor_learner_step
    actor = backends.make_actors(config)
    learner = learner_lib.Learner(
        config, envs_lib.env_spaces(config.env_id)[0], actor.head_sizes)
    history = policy_lag.WeightHistory(config.policy_lag)
    history.push(learner.version, learner.get_weights())
    steps, returns, diagnostics = [], [], collections.defaultdict(list)
    try:
        for update in range(1, config.num_updates + 1):
            unroll, diag = actor_learner_step(actor, learner, history)
            steps += [update * config.steps_per_update] * len(unroll["episode_returns"])
            returns += unroll["episode_returns"].tolist()
            for key in DIAGNOSTICS:
                diagnostics[key].append(diag[key])
            diagnostics["policy_probs"].append(_mean_probs(unroll["behaviour_logits"]))
    finally:
        actor.close()
    blocks = {key: [np.mean(b, axis=0).tolist()
                    for b in np.array_split(np.asarray(values), BLOCKS)]
              for key, values in diagnostics.items()}
    return steps, returns, blocks


def final_returns(steps, returns, total):
    steps, returns = np.asarray(steps), np.asarray(returns)
    late = steps > (1 - FINAL_FRACTION) * total
    return float(returns[late].mean()), float(returns[-100:].mean())


def episode_summary(steps, returns, total):
    """The episodes in `BLOCKS` equal spans of env steps (count, mean
    return) and the returns of the last 10 % of env steps as a histogram
    {return: episodes}: the record stays small enough to commit."""
    steps, returns = np.asarray(steps), np.asarray(returns)
    edges = np.linspace(0, total, BLOCKS + 1)
    index = np.clip(np.searchsorted(edges, steps, side="left") - 1, 0, BLOCKS - 1)
    late = returns[steps > (1 - FINAL_FRACTION) * total]
    values, counts = np.unique(late, return_counts=True)
    return dict(block_env_steps=edges[1:].tolist(),
                block_episodes=np.bincount(index, minlength=BLOCKS).tolist(),
                block_mean_return=[float(returns[index == i].mean())
                                   if (index == i).any() else None
                                   for i in range(BLOCKS)],
                final_histogram={str(v): int(c) for v, c in zip(values, counts)},
                max_return=float(returns.max()), episodes=len(returns))


def run(args):
    import tensorflow as tf
    # One core per run (two runs side by side on the 2-core machine).
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    overrides = dict(item.split("=", 1) for item in args.overrides)
    overrides = {key: _value(value) for key, value in overrides.items()}
    config = make_config(args.game, args.seed, args.total, overrides)
    path = RESULTS / args.game / f"{args.point}_s{args.seed}.json"
    if path.exists():
        print(f"{path} exists")
        return
    start = time.time()
    steps, returns, blocks = train_run(config)
    final, last100 = final_returns(steps, returns, args.total)
    record = dict(game=args.game, point=args.point, seed=args.seed,
                  overrides=overrides, config=config.to_dict(),
                  wall_s=round(time.time() - start, 1),
                  loadavg=open("/proc/loadavg").read().split()[:3],
                  final_return=final, last100_return=last100,
                  diagnostics=blocks, episodes=episode_summary(steps, returns,
                                                               args.total))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    print(f"{args.game} {args.point} seed {args.seed}: final {final:.2f} "
          f"last100 {last100:.2f} ({record['wall_s']} s)")


def summarize(args):
    from benchmarks.learning._stats import bootstrap_band
    rng = np.random.default_rng(0)
    groups = collections.defaultdict(list)
    for path in sorted(RESULTS.glob("*/*.json")):
        record = json.loads(path.read_text())
        if "point" in record:  # (a2c_control/ holds the control's records)
            groups[record["game"], record["point"]].append(record)
    rows = []
    for (game, point), records in sorted(groups.items()):
        finals = [r["final_return"] for r in records]
        mean, low, high = bootstrap_band(finals, rng)
        last = [r["last100_return"] for r in records]
        rows.append(dict(game=game, point=point, seeds=len(records),
                         final=float(mean), band=[float(low), float(high)],
                         last100=float(np.mean(last)), per_seed=finals,
                         entropy_end=float(np.mean(
                             [r["diagnostics"]["entropy"][-1] for r in records])),
                         probs_end=np.mean([r["diagnostics"]["policy_probs"][-1]
                                            for r in records], 0).round(3).tolist(),
                         overrides=records[0]["overrides"]))
        print(f"{game:14s} {point:28s} n={len(records)} {mean:6.2f} "
              f"[{low:6.2f}, {high:6.2f}] last100 {np.mean(last):6.2f} "
              f"H_end {rows[-1]['entropy_end']:.2f} π_end {rows[-1]['probs_end']} "
              + " ".join(f"{f:.2f}" for f in finals))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("--game", default="Breakout")
    run_parser.add_argument("--point", required=True)
    run_parser.add_argument("--seed", type=int, default=0)
    run_parser.add_argument("--total", type=int, default=1_000_000)
    run_parser.add_argument("overrides", nargs="*", help="FIELD=VALUE")
    summary_parser = commands.add_parser("summarize")
    summary_parser.add_argument("--json")
    args = parser.parse_args()
    (run if args.command == "run" else summarize)(args)


if __name__ == "__main__":
    main()
