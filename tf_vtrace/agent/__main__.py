"""Command line: ``python -m tf_vtrace.agent {train,evaluate} ...``.

    python -m tf_vtrace.agent train --env-id CartPole-v1 --out runs/demo
    python -m tf_vtrace.agent evaluate runs/demo/policy --episodes 20

`train` takes ``--preset NAME`` (`tf_vtrace.agent.presets`: ``acrobot``,
``minatar-breakout``, ...) and one ``--flag`` per `Config` field (``--correction
{vtrace,none,is1,epsilon}``, ``--no-correction`` an alias of ``--correction
none``); a bad value is reported before anything starts. `evaluate` loads
the SavedModel and prints the mean return (greedy, and sampled with
``--sampled``), plus a JSON line.
"""

import argparse
import dataclasses
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _config_flags(parser, defaults):
    for field in dataclasses.fields(defaults):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if field.name == "correction":
            from tf_vtrace.agent.config import CORRECTIONS
            parser.add_argument(flag, choices=CORRECTIONS, default=default,
                                help="off-policy correction "
                                     "(tf_vtrace.agent.corrections)")
            parser.add_argument("--no-correction", dest="correction",
                                action="store_const", const="none",
                                help="alias of --correction none")
        elif isinstance(default, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"),
                                default=default, metavar="BOOL")
        elif isinstance(default, tuple):
            parser.add_argument(flag, type=int, nargs="+", default=default)
        elif default is None:
            parser.add_argument(flag, type=float if "clip" in field.name else int,
                                default=None)
        else:
            parser.add_argument(flag, type=type(default), default=default)


def main(argv=None):
    """Runs the command line; returns the exit status."""
    from tf_vtrace.agent.config import Config
    from tf_vtrace.agent.presets import PRESETS

    parser = argparse.ArgumentParser(prog="python -m tf_vtrace.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help="train an IMPALA agent")
    train_parser.add_argument("--out", required=True, help="run directory")
    train_parser.add_argument("--no-progress", action="store_true")
    train_parser.add_argument("--env", dest="env_id", help="alias of --env-id")
    train_parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None,
        help="named settings (tf_vtrace.agent.presets); other flags override")
    _config_flags(train_parser, Config())
    eval_parser = commands.add_parser("evaluate", help="evaluate a SavedModel")
    eval_parser.add_argument("policy", help="the exported policy directory")
    eval_parser.add_argument("--episodes", type=int, default=20)
    eval_parser.add_argument("--sampled", action="store_true",
                             help="sample actions instead of the greedy ones")
    eval_parser.add_argument("--seed", type=int, default=10_000)
    # A preset sets the train flags' defaults, so that flags given win.
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        preset = train_parser.parse_known_args(argv[1:])[0].preset
        train_parser.set_defaults(**PRESETS.get(preset, {}))
    args = parser.parse_args(argv)

    if args.command == "train":
        fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)}
        if fields["env_id"] is None:
            fields["env_id"] = Config.env_id
        try:
            config = Config(**fields)
        except ValueError as error:
            parser.error(str(error))
        from tf_vtrace.agent.train import train
        summary = train(config, args.out, progress=not args.no_progress)
        print(json.dumps(summary))
        return 130 if summary["interrupted"] else 0

    from tf_vtrace.agent.evaluate import evaluate
    returns = evaluate(args.policy, args.episodes, greedy=not args.sampled,
                       seed=args.seed)
    mode = "sampled" if args.sampled else "greedy"
    print(f"{mode} policy, {len(returns)} episodes: mean return "
          f"{returns.mean():.1f} (min {returns.min():.0f}, max {returns.max():.0f})")
    print(json.dumps({"mode": mode, "episodes": len(returns),
                      "mean_return": float(returns.mean()),
                      "returns": returns.tolist()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
