"""Smoke test: benchmarks/bench_core.py runs end to end and prints its table.

`--quick` uses tiny iteration counts, so only the shape of the output is
checked, never the timings.
"""
import pathlib
import subprocess
import sys

from tolerances import SUBPROCESS_TIMEOUT_S

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_bench_core_quick_prints_table():
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_core", "--quick"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=ROOT,
        check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    assert "median us per call" in out
    for name in ("tf_vtrace", "tf.scan (no XLA)", "floor"):
        assert name in out
    for workload in ("importance_weights", "from_logits"):
        assert workload in out
    assert "target: tf_vtrace from_importance_weights at T=100,B=256" in out


def test_actor_backends_quick_prints_table(tmp_path):
    """benchmarks/actor_backends.py --quick with the local and one process
    actor: every measurement is recorded and the table has both rows."""
    import json
    out = tmp_path / "actors.json"
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.actor_backends",
         "--quick", "--settings", "local", "process:1", "--out", str(out)],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=ROOT,
        check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| backend | actors | env steps/s (with learner)" in completed.stdout
    assert "| local | 1 |" in completed.stdout
    assert "| process | 1 |" in completed.stdout
    records = json.loads(out.read_text())["records"]
    assert sorted(records) == ["local", "process:1"]
    for (record,) in records.values():
        assert record["env_steps_per_s"] > 0 and record["actor_env_steps_per_s"] > 0
    assert records["local"][0]["policy_lag_max"] == 0
    assert records["process:1"][0]["policy_lag_max"] == 1


def test_benchmark_paths_named_in_docs_and_makefile_exist():
    """Every `benchmarks/...` path and `-m benchmarks.X` module that the docs,
    the READMEs, the Makefile and the benchmarks themselves name exists, so a
    moved or renamed script cannot leave a dead command behind."""
    import re
    texts = [ROOT / "README.md", ROOT / "Makefile", *ROOT.glob("docs/**/*.md"),
             *(p for p in ROOT.glob("benchmarks/**/*")
               if p.suffix in (".py", ".sh", ".md", ".txt"))]
    named, missing = set(), []
    for text_path in texts:
        text = text_path.read_text(encoding="utf-8")
        for path in re.findall(r"benchmarks/[\w./*-]*\w", text):
            if path.startswith("benchmarks/results"):
                continue  # written by the runs, not committed
            named.add(path)
            if not list(ROOT.glob(path)):
                missing.append(f"{text_path.relative_to(ROOT)}: {path}")
        for module in re.findall(r"-m (benchmarks(?:\.\w+)+)", text):
            named.add(module)
            if not (ROOT / (module.replace(".", "/") + ".py")).is_file():
                missing.append(f"{text_path.relative_to(ROOT)}: -m {module}")
    assert not missing, missing
    assert {"benchmarks/peers/run_all.sh", "benchmarks.bench_core",
            "benchmarks.learning.agent_learning"} <= named


def test_benchmarks_write_under_results_not_docs():
    """The benchmarks write their tables, records and figures under
    benchmarks/results/ (`make docs-data` copies what a page shows into
    docs/img/ and docs/records/): no benchmark builds a path into docs/, and
    no Makefile recipe points a benchmark's `--out` there."""
    import re
    offenders = []
    for path in ROOT.glob("benchmarks/**/*"):
        if path.suffix in (".py", ".sh"):
            text = path.read_text(encoding="utf-8")
            offenders += [f"{path.relative_to(ROOT)}: {match.group(0)}"
                          for match in re.finditer(
                              r"""["']docs["']|--out[ =]docs/|--docs\b""", text)]
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("\t") and re.search(r"--out[ =]docs/", line):
            offenders.append(f"Makefile: {line.strip()}")
    assert not offenders, offenders


def test_bench_agent_quick_reads_our_run(tmp_path):
    """benchmarks/peers/bench_agent.py --quick, our system alone (the RLlib
    venv is `make bench-agent`'s, not the suite's), with a target a short
    run reaches: the env step and wall time of the first 100-episode mean at
    the target come out of the run's own episodes.csv and TensorBoard, and
    the table, JSON and plot are written."""
    import json
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers.bench_agent", "--quick",
         "--systems", "tf_vtrace", "--target", "20", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=ROOT,
        check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "| tf_vtrace | 0 |" in completed.stdout
    assert "| 0 | " in completed.stdout.split("Issue 19's goals")[1]
    (record,) = json.loads((tmp_path / "bench_agent.json").read_text())["records"]
    # 20k rounded up to whole unrolls of the default 16 envs × 20 steps.
    assert record["env_steps"] == 63 * 16 * 20
    assert 0 < record["steps_to_target"] <= record["env_steps"]
    assert 0 < record["wall_to_target_s"] < record["wall_s"]
    assert record["env_steps_per_s"] > 0 and record["learner_steps_per_s"] > 0
    for side in ("learner", "actor"):
        assert 0 <= record[f"{side}_idle_fraction"] <= 1, record
    assert record["policy_lag_mean"] >= 0
    walls, steps, means = zip(*record["curve"])
    assert list(steps) == sorted(steps) and list(walls) == sorted(walls)
    assert (tmp_path / "bench_agent.png").stat().st_size > 0


def _run(system, seed, rate, wall, learner_idle=None, actor_idle=None):
    return {"system": system, "seed": seed, "env_steps_per_s": rate,
            "wall_to_target_s": wall, "learner_idle_fraction": learner_idle,
            "actor_idle_fraction": actor_idle}


def test_bench_agent_goals_per_seed():
    """Issue 19's goals against RLlib's run of the same seed: each measured
    value with met or missed, at and around each bound."""
    from benchmarks.peers.bench_agent import OURS, RLLIB, goals
    records = [
        _run(OURS, 0, 150_000, 8.0, 0.02, 0.12), _run(RLLIB, 0, 12_000, 100.),
        _run(RLLIB, 1, 12_000, None), _run(OURS, 1, 50_000, None, 0.10, 0.),
        _run(OURS, 2, 30_000, 9.0, 0.101, 0.05),
        _run(OURS, 3, 100_000, 50.0), _run(RLLIB, 3, 10_000, None),
        _run(OURS, 4, 24_000, 5.0, 0., 0.), _run(RLLIB, 4, 4_000, 10.),
        _run(RLLIB, 5, 9_000, 60.),  # no run of ours: no row
    ]
    rows = goals(records).splitlines()[2:]
    assert rows == [
        "| 0 | 12.5×: met | 0.080×: met | 2.0%: met | 12.0%: **missed** |",
        "| 1 | 4.2×: **missed** | target not reached: **missed** | 10.0%: met | 0.0%: met |",
        "| 2 | 30,000/s, no RLlib run: met | — (no RLlib run) | 10.1%: **missed** | 5.0%: met |",
        "| 3 | 10.0×: met | RLlib did not reach it: met | — (not measured) | — (not measured) |",
        "| 4 | 6.0×: **missed** | 0.500×: met | 0.0%: met | 0.0%: met |",
    ]
