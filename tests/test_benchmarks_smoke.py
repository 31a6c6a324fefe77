"""Smoke test: benchmarks/bench_core.py runs end to end and prints its table.

`--quick` uses tiny iteration counts, so only the shape of the output is
checked, never the timings.
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_bench_core_quick_prints_table():
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_core.py"), "--quick"],
        capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    assert "median us per call" in out
    for name in ("tf_vtrace", "tf.scan (no XLA)", "floor"):
        assert name in out
    for workload in ("importance_weights", "from_logits"):
        assert workload in out
    assert "target: tf_vtrace from_importance_weights at T=100,B=256" in out
