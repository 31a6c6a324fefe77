"""`benchmarks/learning/agent_learning.py`'s seeds mode end to end on a tiny
run: flags it does not know reach `train` (the seeds table of a changed
setting), its records are cached by flags, and the target counts are
printed; `compare` plots settings' runs side by side with bootstrap bands.
Learning numbers are not asserted (`make learn-full` measures them,
docs/records/agent.md)."""
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
    # compare: the same runs under two labels, one figure, the counts.
    compared = _agent_learning("compare", "--seeds", "3", "--runs",
                               f"a={tmp_path / 'runs'}", f"b={tmp_path / 'runs'}",
                               "--out", str(tmp_path / "compare"))
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert compared.stdout.count("1 seeds: training return reached 475 on 0") == 2
    assert (tmp_path / "compare.png").stat().st_size > 10_000


def test_ablation_refuses_flags_it_does_not_know():
    result = _agent_learning("ablation", "--num-envs", "2")
    assert result.returncode == 2
    assert "unrecognized arguments: --num-envs 2" in result.stderr


def test_compare_names_a_bad_or_missing_run(tmp_path):
    result = _agent_learning("compare", "--runs", "no-label")
    assert result.returncode == 2 and "LABEL=RUNS_DIR" in result.stderr
    result = _agent_learning("compare", "--seeds", "7", "--runs", f"a={tmp_path}")
    assert result.returncode == 2
    assert f"no seeds run of seed 7 at {tmp_path}" in result.stderr


def test_bootstrap_band_brackets_the_mean_at_the_normal_width():
    # 400 draws of N(0, 1): the 95 % band of the mean is about ±1.96/√400.
    code = """
import numpy as np
from benchmarks.learning._stats import bootstrap_band
samples = np.random.default_rng(1).normal(size=400)
mean, low, high = bootstrap_band(samples, np.random.default_rng(2))
print(mean, low, high)
same = bootstrap_band(np.full((5, 3), 2.5), np.random.default_rng(0))
print(*np.concatenate(same))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            text=True, cwd=ROOT, check=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    band, same = result.stdout.splitlines()
    mean, low, high = map(float, band.split())
    assert low < mean < high
    assert abs((high - low) / 2 - 1.96 / 20) < 0.15 * 1.96 / 20
    assert list(map(float, same.split())) == [2.5] * 9
