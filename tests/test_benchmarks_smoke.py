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
        [sys.executable, str(ROOT / "benchmarks" / "bench_core.py"), "--quick"],
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
        [sys.executable, str(ROOT / "benchmarks" / "actor_backends.py"),
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
