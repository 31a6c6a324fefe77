"""The resumable runner of the learning benchmarks (`benchmarks.learning.plans`).

    python -m benchmarks.learning.runner minatar --jobs 2      # make minatar-benchmark
    python -m benchmarks.learning.runner continuous --jobs 2   # make continuous-benchmark
    python -m benchmarks.learning.runner minatar-lag --jobs 2  # make minatar-lag-benchmark
    python -m benchmarks.learning.runner minatar --dry-run     # its commands, nothing run
    python -m benchmarks.learning.runner minatar --report-only # report what is on disk
    python -m benchmarks.learning.runner quick --out /tmp/q    # the suite's version

Every run is ``python -m tf_vtrace.agent train --preset P --seed S
--total-env-steps N [flags]`` in its own process and its own directory,
``<out>/runs/<preset>/<setting>/seed<S>/`` (`--out`: default
benchmarks/results/<plan>/). A run is finished when its ``result.json``
is there, written as it finishes: the final training return (the mean
of its last 100 episodes), its curve (the running mean of 100 episodes at
100 env-step points), env steps, wall time and env steps/s (env steps over
the wall time of all its processes). Invoked again, the runner skips the
finished runs and starts the others: the agent resumes a run directory
from its newest checkpoint by itself, so the benchmark may span
interrupted sessions. Each run's processes are logged to ``train.log``
and timed in ``runner.json`` (every `HEARTBEAT_S` while they run, so a
killed runner loses at most that much of the count). A run directory is
locked while a process trains in it (another runner skips it). The
training processes run in their own sessions: Ctrl-C or SIGTERM to the
runner sends each one SIGINT (the agent's clean stop: a last checkpoint),
and one whose runner dies gets SIGTERM (the same stop).

`--jobs N` trains N runs at once (default 2: the 2-core machine), each
with ``cores / N`` TensorFlow threads of each pool
(``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``, as
`benchmarks.learning.lag_benchmark.threads_per_job`). Then
`benchmarks.learning.report` writes ``<plan>_benchmark.{md,json,png}``
into `--out`; ``make docs-data`` copies what the user pages show. A run
that fails is named with the end of its log, the others go on, and the
exit status is 1.
"""

import argparse
import datetime
import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np

from benchmarks.learning import plans, report
from benchmarks.learning._stats import return_curve
from benchmarks.learning.lag_benchmark import parse_command_line, threads_per_job
from tf_vtrace.agent import recording
from tf_vtrace.agent.presets import PRESETS

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
HEARTBEAT_S = 10.
POLL_S = 0.5
CURVE_POINTS = 100
# Run in front of each training process: SIGTERM to it when the runner
# dies (Linux's parent-death signal, kept across the exec), then the agent.
_GUARD = """import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):
        sys.exit(143)
os.execv(sys.executable, [sys.executable, "-m", "tf_vtrace.agent", *sys.argv[2:]])
"""


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _write_json(path, value):
    """Writes `value` to `path` whole or not at all."""
    path.with_suffix(".tmp").write_text(json.dumps(value, indent=1))
    os.replace(path.with_suffix(".tmp"), path)


def read_segments(run_dir):
    """The run's training processes so far (`runner.json`)."""
    path = run_dir / "runner.json"
    return json.loads(path.read_text())["segments"] if path.exists() else []


def read_result(run, run_dir):
    """The run's ``result.json`` if it finished with these settings (the
    directory may have moved)."""
    path = run_dir / "result.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    return result if result["settings_args"] == run.settings_args() else None


def collect_result(run, run_dir):
    """The finished run's result (written to ``result.json``)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    _, returns = recording.read_episodes(run_dir / "episodes.csv")
    env_steps = summary["env_steps"]
    grid = np.linspace(env_steps / CURVE_POINTS, env_steps, CURVE_POINTS)
    curve = return_curve(run_dir / "episodes.csv", grid)
    segments = read_segments(run_dir)
    wall_s = round(sum(s["wall_s"] for s in segments), 1)
    result = {
        "panel": run.panel, "setting": run.setting, "preset": run.preset,
        "seed": run.seed, "settings_args": run.settings_args(),
        "env_id": summary["env_id"], "env_steps": env_steps,
        "episodes": len(returns),
        "final_return": (float(np.mean(returns[-recording.RECENT_EPISODES:]))
                         if len(returns) else None),
        "wall_s": wall_s, "processes": len(segments),
        "env_steps_per_s": round(env_steps / wall_s, 1) if wall_s else None,
        # The agent's own rate in its last process (after its first update).
        "loop_env_steps_per_s": summary.get("env_steps_per_s"),
        "policy_lag_mean": summary.get("policy_lag_mean"),
        "finished_utc": _now(),
        "curve": {"env_steps": grid.tolist(),
                  "return": [None if np.isnan(v) else float(v) for v in curve]},
    }
    _write_json(run_dir / "result.json", result)
    return result


class TrainingProcess:
    """One run's training process: started with its directory locked,
    timed into ``runner.json`` while it runs."""

    def __init__(self, run, run_dir, env):
        self.run, self.run_dir = run, run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.lock = open(run_dir / "runner.lock", "w")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock.close()
            raise
        self.segments = read_segments(run_dir)
        self.segments.append({"started_utc": _now(), "wall_s": 0., "exit_status": None})
        self.start = self.beat = time.monotonic()
        self._save()
        with open(run_dir / "train.log", "a") as log:
            log.write(f"--- {_now()}: {' '.join(run.train_args(run_dir))}\n")
            log.flush()
            # The child keeps the lock (its descriptor) while it lives.
            self.process = subprocess.Popen(
                [sys.executable, "-c", _GUARD, str(os.getpid()),
                 *run.train_args(run_dir)],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                pass_fds=(self.lock.fileno(),), start_new_session=True)
        self.segments[-1]["pid"] = self.process.pid
        self._save()

    def _save(self):
        self.segments[-1]["wall_s"] = round(time.monotonic() - self.start, 1)
        _write_json(self.run_dir / "runner.json", {"segments": self.segments})

    def poll(self):
        """The exit status once the process has ended (else None)."""
        status = self.process.poll()
        if status is None and time.monotonic() - self.beat >= HEARTBEAT_S:
            self.beat = time.monotonic()
            self._save()
        if status is not None:
            self.segments[-1]["exit_status"] = status
            self._save()
        return status

    def close(self):
        self.lock.close()

    def log_tail(self, lines=15):
        text = (self.run_dir / "train.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def child_env(jobs):
    """The training processes' environment: each its share of the cores."""
    threads = str(threads_per_job(jobs))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.setdefault("TF_NUM_INTRAOP_THREADS", threads)
    env.setdefault("TF_NUM_INTEROP_THREADS", threads)
    return env


def _line(index, total, run, text):
    return f"[{index}/{total}] {run.label}: {text}"


def train_plan(plan, runs_dir, jobs, log=print):
    """Trains the plan's unfinished runs, `jobs` at once; returns the
    failures (run → the end of its log). Ctrl-C waits for the training
    processes' clean stop, then raises KeyboardInterrupt."""
    total = len(plan.runs)
    todo = [(i, run) for i, run in enumerate(plan.runs, 1)
            if read_result(run, run.directory(runs_dir)) is None]
    log(f"{plan.name}: {total - len(todo)} of {total} runs finished, "
        f"{len(todo)} to train, {jobs} at once")
    env, running, failures = child_env(jobs), [], {}
    try:
        while todo or running:
            while todo and len(running) < jobs:
                index, run = todo.pop(0)
                try:
                    running.append((index, TrainingProcess(
                        run, run.directory(runs_dir), env)))
                except BlockingIOError:
                    log(_line(index, total, run, "training in another process: skipped"))
                    continue
                log(_line(index, total, run, f"training ({len(running[-1][1].segments)}"
                          f". process) in {run.directory(runs_dir)}"))
            time.sleep(POLL_S)
            for index, child in list(running):
                status = child.poll()
                if status is None:
                    continue
                running.remove((index, child))
                _finish(index, total, child, status, failures, log)
    except KeyboardInterrupt:
        log("interrupted: waiting for the training processes' last checkpoints")
        for _, child in running:  # (In their own sessions: one signal each.)
            child.process.send_signal(signal.SIGINT)
        for _, child in running:
            child.process.wait()
            child.poll()
            child.close()
        raise
    return failures


def _finish(index, total, child, status, failures, log):
    run = child.run
    if status == 0:
        result = collect_result(run, child.run_dir)
        log(_line(index, total, run, f"final training return "
                  f"{result['final_return']}, {result['env_steps']:,} env steps, "
                  f"{result['wall_s']:.0f} s in {result['processes']} process(es)"))
    elif status in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        log(_line(index, total, run, f"stopped (exit status {status}): resumes "
                  "at the next invocation"))
    else:
        failures[run] = child.log_tail()
        log(_line(index, total, run, f"failed (exit status {status}):\n"
                  f"{failures[run]}"))
    child.close()


def finished_results(plan, runs_dir):
    """(results of the finished runs, the unfinished runs)."""
    results, missing = [], []
    for run in plan.runs:
        result = read_result(run, run.directory(runs_dir))
        (results if result else missing).append(result or run)
    return results, missing


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("plan", choices=sorted(plans.PLANS))
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="runs and report (default: benchmarks/results/<plan>)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="runs trained at once (default 2)")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: report the finished runs on disk")
    parser.add_argument("--dry-run", action="store_true",
                        help="print each run's command and state; run nothing")
    return parser


def main(argv=None):
    parser = build_parser()
    argv, args = parse_command_line(parser, argv)
    plan = plans.PLANS[args.plan]
    unknown = [p for p in plan.presets if p not in PRESETS]
    if unknown and not args.report_only:
        parser.error(f"plan {plan.name!r} names presets that do not exist: "
                     f"{', '.join(unknown)} (tf_vtrace.agent.presets has "
                     f"{', '.join(sorted(PRESETS))})")
    out = args.out or RESULTS / plan.name
    runs_dir = out / "runs"
    if args.dry_run:
        for run in plan.runs:
            state = "finished" if read_result(run, run.directory(runs_dir)) else "to train"
            print(f"{state}: python -m tf_vtrace.agent "
                  f"{' '.join(run.train_args(run.directory(runs_dir)))}")
        return 0
    start, failures = time.time(), {}
    if not args.report_only:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            failures = train_plan(plan, runs_dir, args.jobs)
        except KeyboardInterrupt:
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
    results, missing = finished_results(plan, runs_dir)
    if results:
        path = report.write(plan, results, missing, out, time.time() - start,
                            command=" ".join(["runner.py", *argv]))
        print(f"wrote {path} ({len(results)} of {len(plan.runs)} runs finished)")
    else:
        print(f"no finished run of plan {plan.name!r} under {runs_dir}: no report")
    if failures:
        print(f"failed: {'; '.join(run.label for run in failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
