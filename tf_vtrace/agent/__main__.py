"""Command line: ``python -m tf_vtrace.agent {train,evaluate} ...``.

    python -m tf_vtrace.agent train --env-id CartPole-v1 --out runs/demo
    python -m tf_vtrace.agent evaluate runs/demo --episodes 20

`train` takes ``--preset NAME`` (`tf_vtrace.agent.presets`) and one
``--flag`` per `Config` field, its help the field's attribute docstring
(`tf_vtrace.agent._config_docs`); ``--no-correction`` is an alias of
``--correction none``, ``--sync`` of ``--backend local`` (the synchronous
loop). A bad value is reported in one line before anything starts. Run
again with the same ``--out``, it resumes that run (a different config is
refused, naming the fields; ``--restart`` starts over). Exit status: 0
done, 1 stopped by non-finite updates or failing actors (the checkpoint,
policy and summary are written), 2 a bad config, argument or run directory,
128 + the signal's number after Ctrl-C (130) or SIGTERM (143). `evaluate`
loads each exported policy given (a run directory means its ``policy/``)
and prints the mean return (greedy, or sampled with ``--sampled``) and a
JSON line.

TensorFlow is imported only once a command runs (``--help`` and usage
errors answer without it), through `tf_vtrace._startup_log`, which sets
``TF_CPP_MIN_LOG_LEVEL``'s default here (the user's value wins).
"""

import argparse
import dataclasses
import json
import os
import re
import signal
import sys

from tf_vtrace.agent import _config_docs
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.presets import PRESETS

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _bool(text):
    """argparse type: a true/false form (anything else is a usage error)."""
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise argparse.ArgumentTypeError(
        f"must be true or false (or 1/0, yes/no, on/off), got {text!r}")


def _optional(kind):
    """argparse type: a `kind` number, or ``none`` for None."""
    def parse(text):
        return None if text.lower() == "none" else kind(text)
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value".
    return parse


def _integer_at_least(least):
    """argparse type: an integer >= `least` (else a usage error)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {least}, got {text!r}")
        return value
    return parse


def _config_flags(parser):
    """One flag per `Config` field, help and choices from `_config_docs`."""
    groups = {}
    for doc in _config_docs.field_docs():
        help_text = f"{doc.text} (default: {_config_docs.shown(doc.default)})"
        options = dict(default=doc.default, help=help_text.replace("%", "%%"))
        if doc.choices:
            options.update(choices=doc.choices,
                           metavar="{" + ",".join(doc.choices) + "}")
        elif doc.kind == "bool":
            options.update(type=_bool, metavar="{true,false}")
        elif doc.kind == "tuple":
            options.update(type=int, nargs="+", metavar="N")
        elif doc.kind in ("int", "float"):
            kind = {"int": int, "float": float}[doc.kind]
            options.update(type=kind if doc.default is not None else _optional(kind),
                           metavar=doc.kind.upper())
        if doc.group not in groups:
            groups[doc.group] = parser.add_argument_group(doc.group)
        group = groups[doc.group]
        group.add_argument(doc.flag, **options)
        if doc.name == "env_id":
            group.add_argument("--env", dest="env_id", help="alias of --env-id")
        if doc.name == "correction":
            group.add_argument("--no-correction", dest="correction",
                               action="store_const", const="none",
                               help="alias of --correction none")
        if doc.name == "backend":
            group.add_argument("--sync", dest="backend", action="store_const",
                               const="local", help="alias of --backend local")


_EPILOG = ("Exit status: 0 done, 1 stopped by non-finite updates or failing "
           "actors (checkpoint, policy and summary.json written), 2 a bad "
           "argument, config or run directory, 128 + the signal's number when "
           "interrupted. Every field: docs/reference/config.md.")


def _train_parser(commands):
    parser = commands.add_parser(
        "train", help="train an IMPALA agent (resumes the run in --out)",
        usage="%(prog)s --out DIR [--preset NAME] [--FIELD VALUE ...]",
        description="Train an IMPALA agent; the run directory --out holds its "
                    "config, checkpoints, policy and records.",
        epilog=_EPILOG)
    parser.add_argument(
        "--out", required=True, metavar="DIR",
        help="run directory; a run already there (same config) is resumed "
             "from its newest usable checkpoint")
    parser.add_argument(
        "--restart", action="store_true",
        help="remove the outputs of the run in --out and start over")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar")
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None,
        help="start from named settings (tf_vtrace.agent.presets); flags "
             "given win")
    _config_flags(parser)
    return parser


def _evaluate_parser(commands):
    parser = commands.add_parser(
        "evaluate", help="evaluate exported policies",
        description="Play episodes with exported policies and print their "
                    "mean return and a JSON line each.")
    parser.add_argument(
        "policies", nargs="+", metavar="POLICY",
        help="exported policy directories, or run directories (their policy/); "
             "several: one after the other, in one process")
    parser.add_argument("--episodes", type=_integer_at_least(1), default=20,
                        help="episodes per policy, one env each (default: 20)")
    parser.add_argument("--sampled", action="store_true",
                        help="sample actions instead of the greedy ones")
    parser.add_argument("--seed", type=_integer_at_least(0), default=10_000,
                        help="env i is seeded seed + i (default: 10000)")
    parser.add_argument(
        "--env-id", "--env", dest="env_id", default=None,
        help="play this env instead of the one recorded with the policy "
             "(a gymnasium id, module:EnvId-v0 or module:ClassName)")
    return parser


def _parsers():
    """The command line's parser and its train and evaluate subparsers."""
    parser = argparse.ArgumentParser(prog="python -m tf_vtrace.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    return parser, _train_parser(commands), _evaluate_parser(commands)


def _parser():
    """The command line's parser and its train subparser."""
    return _parsers()[:2]


def _with_flags(message):
    """A `Config` error naming the flag too: ``--num-envs (Config.num_envs)``."""
    return re.sub(r"Config\.(\w+)",
                  lambda m: f"--{m.group(1).replace('_', '-')} (Config.{m.group(1)})",
                  message, count=1)


def _config(parser, args):
    """The validated `Config` of the parsed flags (a usage error otherwise)."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)}
    try:
        config = Config(**fields)
        if config.strategy == "multi_worker":
            from tf_vtrace.agent.learner import check_tf_config
            check_tf_config()
    except ValueError as error:
        parser.error(_with_flags(str(error)))
    return config


def run_training(config, args):
    """Trains `config` into ``args.out``; returns the exit status."""
    from tf_vtrace._startup_log import import_tensorflow
    import_tensorflow()
    from tf_vtrace.agent import backends
    from tf_vtrace.agent import train as train_lib
    try:
        summary = train_lib.train(config, args.out, restart=args.restart,
                                  progress=not args.no_progress)
    except train_lib.RunDirectoryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (train_lib.NonFiniteUpdates, backends.ActorFailure) as error:
        print(f"error: {error}\n(the checkpoint, policy and summary.json are "
              f"in {args.out})", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    if not summary["interrupted"]:
        return 0
    # The shell's convention: 128 + the signal's number.
    return 128 + signal.Signals[summary["stop_signal"]].value


def _policy_directory(path):
    """`path`, or its ``policy/`` when `path` is a run directory."""
    inner = os.path.join(path, "policy")
    if (os.path.isdir(inner) and not os.path.exists(
            os.path.join(path, "saved_model.pb"))):
        print(f"{path} is a run directory: evaluating {inner}",
              file=sys.stderr)
        return inner
    return path


def run_evaluation(parser, args):
    """Evaluates each policy in turn; a missing or broken one is reported
    (exit status 2) without stopping the others."""
    if args.env_id is not None:
        from tf_vtrace.agent import envs
        try:
            envs.check_env_id(args.env_id)
        except (ValueError, ImportError) as error:
            parser.error(str(error).replace("Config.env_id", "--env-id"))
    status = 0
    for policy in map(_policy_directory, args.policies):
        if not os.path.isdir(policy):  # Said before TensorFlow starts.
            print(f"error: {policy}: no such policy directory (nor a run "
                  f"directory holding one in policy/)", file=sys.stderr)
            status = 2
        elif not _evaluate_policy(policy, args):
            status = 2
    return status


def _evaluate_policy(policy, args):
    """Prints the returns of `policy`, or an error line (then False)."""
    from tf_vtrace._startup_log import import_tensorflow
    import_tensorflow()
    from tf_vtrace.agent.evaluate import PolicyError, evaluate
    mode = "sampled" if args.sampled else "greedy"
    try:
        returns = evaluate(policy, args.episodes, greedy=not args.sampled,
                           seed=args.seed, env_id=args.env_id)
    except (PolicyError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    print(f"{policy}: {mode}, {len(returns)} episodes: mean return "
          f"{returns.mean():.4g} (min {returns.min():.4g}, max "
          f"{returns.max():.4g})")
    print(json.dumps({"policy": policy, "mode": mode, "episodes": len(returns),
                      "mean_return": float(returns.mean()),
                      "returns": returns.tolist()}), flush=True)
    return True


def main(argv=None):
    """Runs the command line; returns the exit status."""
    parser, train_parser, evaluate_parser = _parsers()
    # A preset sets the train flags' defaults, so that flags given win.
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        preset = train_parser.parse_known_args(argv[1:])[0].preset
        train_parser.set_defaults(**PRESETS.get(preset, {}))
    args = parser.parse_args(argv)
    if args.command == "train":
        return run_training(_config(train_parser, args), args)
    return run_evaluation(evaluate_parser, args)


if __name__ == "__main__":
    sys.exit(main())
