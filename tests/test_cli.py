"""The command line (tf_vtrace/agent/__main__.py): every flag explained,
--help and argument errors without TensorFlow, one line per bad argument,
`evaluate RUN_DIR`, `--env-id`, and no TensorFlow ERROR line about CUDA on a
machine without an NVIDIA device."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

from tf_vtrace import _startup_log
from tf_vtrace.agent import __main__ as cli
from tf_vtrace.agent import _config_docs

CHOICE_FLAGS = ["--optimizer", "--core", "--vector-env", "--actor-inference",
                "--strategy", "--backend", "--correction", "--preset"]


def _environment(**changes):
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return {**environ, **changes}


def _run(*args, environ=None, cwd=None, python_flags=()):
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "tf_vtrace.agent", *args],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=cwd,
        env=environ or _environment())


def _help(command):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0


def test_train_help_explains_every_flag_with_its_default_and_choices(capsys):
    _help("train")
    text = " ".join(capsys.readouterr().out.split())
    for doc in _config_docs.field_docs():
        assert f"{doc.flag} " in text, doc.flag
        assert doc.text.split()[0] in text and "(default: " in text, doc.flag
    for flag in CHOICE_FLAGS:
        assert re.search(rf"{flag} \{{[\w,-]+\}}", text), flag
    assert "is1 (1-step importance sampling)" in text
    assert "--correction {vtrace,none,is1,epsilon}" in text
    assert "(default: 300000)" in text and "(default: 64 64)" in text
    # Every action has a help line (argparse shows none for help=None).
    parser, train_parser, evaluate_parser = cli._parsers()
    for action in train_parser._actions + evaluate_parser._actions:
        assert action.help, action.option_strings


def test_help_and_usage_errors_do_not_import_tensorflow():
    for args in (["train", "--help"], ["evaluate", "--help"],
                 ["train", "--out", "x", "--jit-compile", "ture"],
                 ["train", "--out", "x", "--learning-rate", "inf"],
                 ["evaluate", "x", "--seed", "-1"]):
        result = _run(*args, python_flags=["-X", "importtime"])
        assert result.returncode in (0, 2), result.stderr[-3000:]
        imported = re.findall(r"\|\s+(\S+)\s*$", result.stderr, re.M)
        assert "tf_vtrace.agent.config" in imported, result.stderr[-3000:]
        assert "tensorflow" not in imported, args


@pytest.mark.parametrize("args, message", [
    (["--jit-compile", "ture"], "argument --jit-compile: must be true or false"),
    (["--separate-value-core", "2"], "argument --separate-value-core: must be true or false"),
    (["--learning-rate", "inf"], "--learning-rate (Config.learning_rate) must be a finite"),
    (["--learning-rate", "nan"], "--learning-rate (Config.learning_rate) must be a finite"),
    (["--discount", "1.5"], "--discount (Config.discount) must be in [0, 1]"),
    (["--max-grad-norm=-inf"], "--max-grad-norm (Config.max_grad_norm) must be"),
    (["--entropy-cost", "inf"], "--entropy-cost (Config.entropy_cost) must be"),
    (["--checkpoint-every-s", "inf"], "--checkpoint-every-s (Config.checkpoint_every_s)"),
    (["--reward-clip", "nan"], "--reward-clip (Config.reward_clip) must be"),
    (["--core", "gru"], "argument --core: invalid choice: 'gru'"),
    (["--env", "no_such_module_here:Env-v0"], "cannot import 'no_such_module_here'"),
])
def test_a_bad_train_argument_is_one_line_before_any_work(args, message, tmp_path,
                                                          capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--out", str(out), *args])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert message in error and "Traceback" not in error
    assert not out.exists()


@pytest.mark.parametrize("form, value", [("true", True), ("False", False), ("1", True),
                                         ("no", False), ("ON", True)])
def test_bool_flags_take_true_and_false_forms(form, value):
    _, train_parser, _ = cli._parsers()
    args = train_parser.parse_args(["--out", "x", "--jit-compile", form])
    assert args.jit_compile is value


def test_optional_numbers_take_none_and_flags_after_a_preset_win():
    _, train_parser, _ = cli._parsers()
    args = train_parser.parse_args(["--out", "x", "--max-episode-steps", "none",
                                    "--reward-clip", "1.5"])
    assert args.max_episode_steps is None and args.reward_clip == 1.5
    config = cli._config(train_parser, args)
    assert config.reward_clip == 1.5


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
    (["--episodes", "0"], "argument --episodes: must be an integer >= 1"),
    (["--env-id", "NoSuchEnv-v3"], "--env-id: 'NoSuchEnv-v3' is not a registered"),
])
def test_a_bad_evaluate_argument_is_one_line(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["evaluate", str(tmp_path), *args])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert message in error and "Traceback" not in error


def test_evaluate_reports_a_missing_directory_and_goes_on(tmp_path, capsys):
    assert cli.main(["evaluate", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'nope'}: no such policy directory (nor a run directory "
        f"holding one in policy/)\n")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory holding an exported (untrained) CartPole policy."""
    from tf_vtrace import export
    from tf_vtrace.agent import envs, networks
    run = tmp_path_factory.mktemp("run")
    observation_space, action_space = envs.env_spaces("CartPole-v1")
    model = networks.build_network(observation_space, envs.head_sizes(action_space),
                                   seed=0)
    export.export_policy(model, str(run / "policy"), (2,),
                         metadata={"env_id": "CartPole-v1", "max_episode_steps": 30})
    return run


def test_evaluate_a_run_directory_finds_its_policy(run_dir, capsys):
    assert cli.main(["evaluate", str(run_dir), "--episodes", "2"]) == 0
    captured = capsys.readouterr()
    assert f"{run_dir} is a run directory: evaluating {run_dir / 'policy'}" in captured.err
    result = json.loads(captured.out.splitlines()[-1])
    assert result["policy"] == str(run_dir / "policy") and result["episodes"] == 2
    # The recorded time limit (30 steps) holds: CartPole pays 1 a step.
    assert all(1 <= r <= 30 for r in result["returns"])


def test_evaluate_env_id_overrides_the_recorded_env(run_dir, capsys):
    # CartPole-v0: the same spaces, another id (and a 200-step limit).
    assert cli.main(["evaluate", str(run_dir), "--episodes", "2", "--env-id",
                     "CartPole-v0"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(run_dir), "--env-id",
                     "tf_vtrace/StatelessCartPole-v0"]) == 2
    error = capsys.readouterr().err
    assert ("the policy takes observations of shape (4,) and acts with heads (2,); "
            "'tf_vtrace/StatelessCartPole-v0' gives (2,)") in error
    assert "Traceback" not in error


def test_evaluate_names_a_recorded_env_it_cannot_make(tmp_path, capsys):
    """A policy trained on an id registered in the training script only."""
    from tf_vtrace import export
    from tf_vtrace.agent import envs, networks
    observation_space, action_space = envs.env_spaces("CartPole-v1")
    model = networks.build_network(observation_space, envs.head_sizes(action_space),
                                   seed=0)
    export.export_policy(model, str(tmp_path / "policy"), (2,),
                         metadata={"env_id": "ScriptOnly-v0", "max_episode_steps": None})
    assert cli.main(["evaluate", str(tmp_path)]) == 2
    note, error = capsys.readouterr().err.splitlines()
    assert note.endswith("is a run directory: evaluating " + str(tmp_path / "policy"))
    assert error.startswith(f"error: {tmp_path / 'policy'}: 'ScriptOnly-v0' is not a "
                            f"registered gymnasium environment"), error
    assert "pass env_id (--env-id) naming its module, 'module:ScriptOnly-v0'" in error


@pytest.mark.parametrize("platform, devices, level", [
    ("linux", (), 3), ("linux", ("/dev/nvidiactl", "/dev/nvidia0"), 2),
    ("linux", ("/dev/dxg",), 2), ("darwin", (), 2), ("win32", (), 2)])
def test_the_default_log_level_hides_errors_only_without_an_nvidia_device(
        platform, devices, level):
    assert _startup_log.default_level(platform, devices.__contains__) == level


def test_a_cli_run_on_this_machine_shows_no_tensorflow_log_line(tmp_path):
    """On a machine without an NVIDIA device (this one, in CI), TensorFlow's
    GPU build logs "failed call to cuInit" at its first op: the CLI's default
    level keeps it out; a level the user sets wins."""
    out = tmp_path / "run"
    result = _run("train", "--out", str(out), "--total-env-steps", "320",
                  "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cuInit" not in result.stderr and "cuda" not in result.stderr.lower()
    assert not re.search(r"^[IWE]\d{4} ", result.stderr, re.M), result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1])["env_steps"] == 320
    if _startup_log.default_level() == 3:
        loud = _run("evaluate", str(out), "--episodes", "1",
                    environ=_environment(TF_CPP_MIN_LOG_LEVEL="0"))
        assert loud.returncode == 0 and "cuInit" in loud.stderr, loud.stderr[-3000:]


DEFERRED = """
import sys
sys.orig_argv = [sys.executable, "-m", "tf_vtrace.agent"]
import tf_vtrace
assert "tensorflow" not in sys.modules
"""
NAMES = """
import tf_vtrace
for name in tf_vtrace.__all__:
    value = getattr(tf_vtrace, name)
    print(name, value.__module__, value.__qualname__)
"""


def test_the_public_names_are_the_same_when_tensorflow_is_deferred():
    def names(program):
        result = subprocess.run([sys.executable, "-c", program], capture_output=True,
                                text=True, timeout=SUBPROCESS_TIMEOUT_S)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    eager, deferred = names(NAMES), names(DEFERRED + NAMES)
    assert eager == deferred and len(eager.splitlines()) > 20
    assert np.all([line.split()[1].startswith("tf_vtrace.")
                   for line in eager.splitlines()])
