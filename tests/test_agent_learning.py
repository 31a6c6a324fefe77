"""`benchmarks/learning/agent_learning.py`'s seeds mode end to end on a tiny
run: flags it does not know reach `train` (the seeds table of a changed
setting), its records are cached by flags, and the target counts are
printed. Learning numbers are not asserted (`make learn-full` measures
them, docs/agent.md)."""
import json
import os
import pathlib
import subprocess
import sys

from tolerances import SUBPROCESS_TIMEOUT_S

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _agent_learning(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.learning.agent_learning", *args],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), check=False)


def test_seeds_pass_unknown_flags_to_train_and_count_targets(tmp_path):
    args = ("seeds", "--seeds", "3", "--steps", "80", "--runs-dir",
            str(tmp_path / "runs"), "--out", str(tmp_path / "table"),
            "--num-envs", "2", "--unroll-length", "4", "--jit-compile", "false")
    result = _agent_learning(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "seeds" / "seed3"
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["num_envs"], config["unroll_length"], config["seed"]) == (2, 4, 3)
    (record,) = json.loads((tmp_path / "table.json").read_text())
    assert record["env_steps"] == 80 and record["flags"][-6:] == list(args[-6:])
    assert ("1 seeds: training return reached 475 on 0; greedy >= 475 with the "
            "best policy on 0, with the final policy on 0") in result.stdout
    # A second call reads the record instead of training again.
    again = _agent_learning(*args)
    assert again.returncode == 0 and "| 3 |" in again.stdout
    assert json.loads((tmp_path / "table.json").read_text()) == [record]


def test_ablation_refuses_flags_it_does_not_know():
    result = _agent_learning("ablation", "--num-envs", "2")
    assert result.returncode == 2
    assert "unrecognized arguments: --num-envs 2" in result.stderr
