"""Command line: ``python -m tf_vtrace.agent {train,evaluate} ...``.

    python -m tf_vtrace.agent train --env-id CartPole-v1 --out runs/demo
    python -m tf_vtrace.agent evaluate runs/demo/policy --episodes 20

`train` takes ``--preset NAME`` (`tf_vtrace.agent.presets`: ``acrobot``,
``minatar-breakout``, ...) and one ``--flag`` per `Config` field (``--correction
{vtrace,none,is1,epsilon}``, ``--no-correction`` an alias of ``--correction
none``, ``--sync`` an alias of ``--backend local``: the synchronous loop);
a bad value is reported before anything starts. Run again with
the same ``--out``, it resumes that run (a different config is refused,
naming the fields; ``--restart`` starts over). Exit status: 0 done, 1
stopped by non-finite updates or failing actors (the checkpoint, policy and
summary are written), 2 a bad config or run directory, 128 + the signal's
number after Ctrl-C (130) or SIGTERM (143). `evaluate` loads
the SavedModel and prints the mean return (greedy, and sampled with
``--sampled``), plus a JSON line, for each policy directory it is given
(several in one process: TensorFlow starts once). `TF_CPP_MIN_LOG_LEVEL`
defaults to 2 here, TensorFlow's start-up lines included
(`tf_vtrace._startup_log`).
"""

import argparse
import dataclasses
import json
import signal
import sys


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
        elif field.name == "backend":
            from tf_vtrace.agent.config import BACKENDS
            parser.add_argument(flag, choices=BACKENDS, default=default,
                                help="where the actors run "
                                     "(tf_vtrace.agent.backends)")
            parser.add_argument("--sync", dest="backend", action="store_const",
                                const="local",
                                help="alias of --backend local: the "
                                     "synchronous loop (collect, then learn)")
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


def _at_least_one(text):
    """argparse type: an integer >= 1 (a bad one is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _parser():
    from tf_vtrace.agent.config import Config
    from tf_vtrace.agent.presets import PRESETS

    parser = argparse.ArgumentParser(prog="python -m tf_vtrace.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser(
        "train", help="train an IMPALA agent (resumes the run in --out)")
    train_parser.add_argument(
        "--out", required=True,
        help="run directory; a run already there (same config) is resumed "
             "from its newest usable checkpoint")
    train_parser.add_argument(
        "--restart", action="store_true",
        help="remove the outputs of the run in --out and start over")
    train_parser.add_argument("--no-progress", action="store_true")
    train_parser.add_argument("--env", dest="env_id", help="alias of --env-id")
    train_parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None,
        help="named settings (tf_vtrace.agent.presets); other flags override")
    _config_flags(train_parser, Config())
    eval_parser = commands.add_parser("evaluate", help="evaluate a SavedModel")
    eval_parser.add_argument(
        "policies", nargs="+", metavar="POLICY",
        help="exported policy directories (several: one after the other, "
             "in one process)")
    eval_parser.add_argument("--episodes", type=_at_least_one, default=20)
    eval_parser.add_argument("--sampled", action="store_true",
                             help="sample actions instead of the greedy ones")
    eval_parser.add_argument("--seed", type=int, default=10_000)
    return parser, train_parser


def _train(parser, args):
    from tf_vtrace.agent.config import Config

    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)}
    if fields["env_id"] is None:
        fields["env_id"] = Config.env_id
    try:
        config = Config(**fields)
        if config.strategy == "multi_worker":
            from tf_vtrace.agent.learner import check_tf_config
            check_tf_config()
    except ValueError as error:
        parser.error(str(error))
    from tf_vtrace.agent import _faults
    from tf_vtrace.agent import train as train_lib
    try:
        summary = train_lib.train(config, args.out, restart=args.restart,
                                  progress=not args.no_progress)
    except (Exception, KeyboardInterrupt) as error:  # One line, its part.
        line, status = _faults.describe(error)
        print(line, file=sys.stderr)
        return status
    print(json.dumps(summary))
    if not summary["interrupted"]:
        return 0
    # The shell's convention: 128 + the signal's number.
    return 128 + signal.Signals[summary["stop_signal"]].value


def _evaluate(args):
    """Evaluates each policy in turn; a missing or broken one is reported
    (exit status 2) without stopping the others."""
    from tf_vtrace.agent.evaluate import PolicyError, evaluate
    status = 0
    mode = "sampled" if args.sampled else "greedy"
    for policy in args.policies:
        try:
            returns = evaluate(policy, args.episodes, greedy=not args.sampled,
                               seed=args.seed)
        except PolicyError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 2
            continue
        print(f"{policy}: {mode}, {len(returns)} episodes: mean return "
              f"{returns.mean():.1f} (min {returns.min():.0f}, max "
              f"{returns.max():.0f})")
        print(json.dumps({"policy": policy, "mode": mode,
                          "episodes": len(returns),
                          "mean_return": float(returns.mean()),
                          "returns": returns.tolist()}), flush=True)
    return status


def main(argv=None):
    """Runs the command line; returns the exit status."""
    from tf_vtrace.agent.presets import PRESETS

    parser, train_parser = _parser()
    # A preset sets the train flags' defaults, so that flags given win.
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        preset = train_parser.parse_known_args(argv[1:])[0].preset
        train_parser.set_defaults(**PRESETS.get(preset, {}))
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(parser, args)
    return _evaluate(args)


if __name__ == "__main__":
    sys.exit(main())
