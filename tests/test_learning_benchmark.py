"""The learning benchmarks' runner (`make minatar-benchmark`, `make
continuous-benchmark`) end to end on its quick plan: CartPole, 2 seeds ×
4,800 env steps, a checkpoint every 4 updates. The runner and its training
processes are SIGKILLed while a run is half done, the runner is invoked
again, the run finishes from its checkpoint and the report is written; a
third invocation trains nothing. Learning numbers are not asserted (the
full plans measure them)."""
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tolerances import POLL_TIMEOUT_S, SUBPROCESS_TIMEOUT_S

from benchmarks.learning import plans, references, report, runner
from tf_vtrace.agent.presets import PRESETS

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "benchmarks.learning.runner", "quick", "--jobs", "2"]


def _checkpoints(run_dir):
    return sorted((run_dir / "checkpoints").glob("ckpt-*.index"))


def _start_and_kill_mid_run(out):
    """Starts the runner; once a run has two checkpoints (so the first is
    complete) and has not finished, and every other run has finished or has
    two checkpoints too, SIGKILLs the runner and its training processes.
    Returns the directory of a run killed half done."""
    process = subprocess.Popen([*COMMAND, "--out", str(out)], cwd=ROOT,
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    run_dirs = [run.directory(out / "runs") for run in plans.PLANS["quick"].runs]
    deadline = time.monotonic() + POLL_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            done = [d for d in run_dirs if (d / "summary.json").exists()]
            half_done = [d for d in run_dirs if len(_checkpoints(d)) >= 2
                         and d not in done]
            if half_done and len(done) + len(half_done) == len(run_dirs):
                break
            assert process.poll() is None, "the runner ended before a run was half done"
            time.sleep(0.02)
        else:
            pytest.fail(f"no run had two checkpoints within {POLL_TIMEOUT_S} s")
    finally:
        # The runner first (stopped, so that it does not see its children
        # die), then every training process it started, then the runner.
        os.kill(process.pid, signal.SIGSTOP)
        for run_dir in run_dirs:
            for segment in runner.read_segments(run_dir):
                try:
                    os.kill(segment["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    return half_done[0]


def _invoke(out, *flags):
    result = subprocess.run([*COMMAND, "--out", str(out), *flags], cwd=ROOT,
                            capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_quick_plan_resumes_a_killed_run_and_reports(tmp_path):
    killed = _start_and_kill_mid_run(tmp_path)
    kept = int(_checkpoints(killed)[-1].name[len("ckpt-"):-len(".index")])
    assert not (killed / "result.json").exists()

    stdout = _invoke(tmp_path)
    assert "wrote " in stdout and "2 of 2 runs finished" in stdout, stdout
    summary = json.loads((killed / "summary.json").read_text())
    # Resumed from a checkpoint it had (the newest one, unless the kill cut
    # that one short), and trained to the end.
    assert 4 <= summary["resumed_at_update"] <= kept, summary
    assert summary["env_steps"] == 4_800 and not summary["interrupted"]
    result = json.loads((killed / "result.json").read_text())
    assert result["processes"] == 2 and result["env_steps"] == 4_800
    segments = runner.read_segments(killed)
    assert segments[0]["exit_status"] is None and segments[1]["exit_status"] == 0
    assert result["wall_s"] == pytest.approx(sum(s["wall_s"] for s in segments), abs=0.2)
    # The episodes after the checkpoint were cut and learned again: the
    # steps never go back, and the final return is the last 100 episodes'.
    with open(killed / "episodes.csv") as handle:
        rows = list(csv.DictReader(handle))
    steps = np.array([float(r["env_steps"]) for r in rows])
    returns = np.array([float(r["return"]) for r in rows], np.float64)
    assert np.all(np.diff(steps) >= 0) and steps[-1] <= 4_800
    assert result["final_return"] == pytest.approx(returns[-100:].mean(), rel=1e-12)
    assert result["curve"]["return"][-1] == pytest.approx(returns[-100:].mean(),
                                                          rel=1e-12)

    data = json.loads((tmp_path / "quick_benchmark.json").read_text())
    (row,) = data["rows"]
    assert row["seeds"] == [0, 1] and data["missing"] == []
    finals = [json.loads((run.directory(tmp_path / "runs") / "result.json")
                         .read_text())["final_return"]
              for run in plans.PLANS["quick"].runs]
    assert row["final_return"] == pytest.approx(np.mean(finals), rel=1e-12)
    low, high = row["final_return_ci95"]
    assert min(finals) <= low <= row["final_return"] <= high <= max(finals)
    page = (tmp_path / "quick_benchmark.md").read_text()
    assert "| CartPole-v1 | V-trace, natural lag | 2 of 2 | 4.8k |" in page
    assert "![curves](quick_benchmark.png)" in page
    assert (tmp_path / "quick_benchmark.png").stat().st_size > 10_000

    # Invoked again (in this process): nothing to train, the report again.
    before = {d: runner.read_segments(d) for d in
              (run.directory(tmp_path / "runs") for run in plans.PLANS["quick"].runs)}
    assert runner.main(["quick", "--out", str(tmp_path)]) == 0
    assert {d: runner.read_segments(d) for d in before} == before
    assert json.loads((tmp_path / "quick_benchmark.json").read_text())["rows"] == [row]


def test_docs_fill_replaces_only_blocks_with_results(tmp_path):
    """`make docs-data`'s fill: the block of a benchmark with results gets
    its tables and figure link; one without results stays as written."""
    results = tmp_path / "results"
    plan = plans.PLANS["quick"]
    result = {"panel": "CartPole-v1", "setting": plan.settings[0], "seed": 0,
              "env_steps": 1000, "final_return": 20., "wall_s": 10.,
              "env_steps_per_s": 100.,
              "curve": {"env_steps": [500, 1000], "return": [10., 20.]}}
    report.write(plan, [result, dict(result, seed=1, final_return=30.)], [],
                 results / "quick", 1., "test")
    page = tmp_path / "docs" / "explanation" / "page.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Page\n\n<!-- benchmark: quick -->\nstub\n<!-- /benchmark: quick -->\n"
                    "\n<!-- benchmark: minatar -->\nstub 2\n<!-- /benchmark: minatar -->\n")
    assert report.fill(page, results, tmp_path / "docs" / "img") == ["quick"]
    text = page.read_text()
    assert "stub\n" not in text and "stub 2" in text
    assert "![CartPole, quick](../img/quick_benchmark.png)" in text
    assert "| CartPole-v1 | V-trace, natural lag | 2 of 2 | 1k | 25.0 [20.0, 30.0] |" in text


def _row(grid, mean):
    return {"grid_env_steps": list(grid), "curve_mean": list(mean)}


def test_goal_outcomes_at_and_within():
    row = _row([250_000, 500_000, 750_000, 1_000_000], [1., 4., 10., 8.])
    within = references.Goal("X", 9., 1_000_000, "within")
    assert report.goal_outcome(within, row)["met"] is True
    assert report.goal_outcome(within, row)["text"] == "reached at 750k"
    early = references.Goal("X", 9., 500_000, "within")
    assert report.goal_outcome(early, row) == {"measured": 4., "met": False,
                                               "text": "best 4.0"}
    # "at": the mean curve there (interpolated), not its best before.
    at = references.Goal("X", 9., 1_000_000, "at")
    assert report.goal_outcome(at, row)["measured"] == 8. and not report.goal_outcome(
        at, row)["met"]
    assert report.goal_outcome(references.Goal("X", 5., 625_000, "at"), row)["measured"] == 7.
    later = references.Goal("X", 1., 5_000_000, "at")
    assert report.goal_outcome(later, row)["met"] is None


def test_plans_as_the_issues_ask():
    minatar = plans.PLANS["minatar"]
    assert len(minatar.runs) == 15 and len(minatar.panels) == 5
    assert {run.env_steps for run in minatar.runs} == {5_000_000}
    continuous = plans.PLANS["continuous"]
    # 4 envs × 3 seeds, plus HalfCheetah's 3 more settings × 3 seeds (its
    # V-trace run at the natural lag serves both parts).
    assert len(continuous.runs) == 12 + 9
    cheetah = {run.setting for run in continuous.runs if run.panel == "HalfCheetah-v5"}
    assert cheetah == {"V-trace, natural lag", "no correction, natural lag",
                       "V-trace, lag 16", "no correction, lag 16"}
    lag = plans.PLANS["minatar-lag"]
    assert len(lag.runs) == 2 * 3 * 2 * 3
    run = next(r for r in lag.runs if r.setting == "no correction, lag 64")
    args = run.train_args("d")
    assert args[args.index("--policy-lag") + 1] == "64"
    assert args[args.index("--backend") + 1] == "local"
    assert args[args.index("--correction") + 1] == "none"
    for plan in plans.PLANS.values():
        panels = set(plan.panels)
        assert {ref.panel for ref in plan.references} & panels or not plan.references
        assert {goal.panel for goal in plan.goals} <= panels


def test_plans_name_existing_presets():
    """Every preset a plan trains exists (the MinAtar and continuous
    presets are added beside this runner)."""
    missing = {plan.name: [p for p in plan.presets if p not in PRESETS]
               for plan in plans.PLANS.values()}
    assert not any(missing.values()), missing


def test_bad_arguments_are_refused_by_name(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_:
        runner.main(["quick", "--jobs", "0"])
    assert exit_.value.code == 2 and "--jobs must be >= 1, got 0" in capsys.readouterr().err
    bogus = plans.Plan("bogus", "Bogus", (plans.Run("CartPole-v1", "x", "no-such-preset",
                                                    0, 100),))
    monkeypatch.setitem(plans.PLANS, "bogus", bogus)
    with pytest.raises(SystemExit) as exit_:
        runner.main(["bogus", "--dry-run"])
    assert exit_.value.code == 2
    assert ("plan 'bogus' names presets that do not exist: no-such-preset"
            in capsys.readouterr().err)
