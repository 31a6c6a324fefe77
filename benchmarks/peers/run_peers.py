"""tf_vtrace against its peers, each in its own process and venv, in one run.

    .venv/bin/python -m benchmarks.peers.run_peers [--quick] [--base-only]
        [--only NAME ...] [--baseline DIR]

(`run_all.sh` makes the venvs.)

Prints, for every workload, the median µs per call of each implementation, its
ratio to tf_vtrace and the max |difference| of its outputs from tf_vtrace's on
the same inputs; then the scaling runs (time and per-call peak memory) and the
first-call latency of each implementation in a fresh process. Results also go
to benchmarks/results/peers.json (for plot_scaling.py). `--base-only` times
the three base cases alone (no scaling runs, no fresh-process probes) and
saves benchmarks/results/peers_base.json. `--only` runs the named
implementations alone (with tf_vtrace and rlax, the references). `--baseline
DIR` also runs every tf_vtrace row with the library of another checkout
(e.g. a `git worktree` of the commit before a change) and this checkout's
benchmark code, as "NAME (before)" rows that alternate with the others:
before and after in one run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import harness

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name -> (venv under the repo root, impl module). The first six run every
# case, the scaling runs and the fresh-process probes.
IMPLEMENTATIONS = {
    "tf_vtrace": (".venv", "impl_tf"),
    "floor": (".venv", "impl_tf"),
    "trfl": (".venv-bench-tf", "impl_tf"),
    "rlax": (".venv-bench-jax", "impl_jax"),
    "torch loop": (".venv-bench-torch", "impl_torch"),
    "numpy loop": (".venv", "impl_numpy"),
}
SCALING_IMPLEMENTATIONS = tuple(IMPLEMENTATIONS)
# How a user calls tf_vtrace (impl_tf.VTRACE_FUNCTIONS, impl_tf.LEARNER_STEPS):
# these run the iw_100x256, iw_20x32 and learner cases only.
IMPLEMENTATIONS.update({
    "tf_vtrace in user plain fn": (".venv", "impl_tf"),
    "tf_vtrace in user jit fn": (".venv", "impl_tf"),
    "tf_vtrace impala_loss in jit fn": (".venv", "impl_tf"),
    "tf_vtrace impala_loss, no diagnostics": (".venv", "impl_tf"),
    "tf_vtrace impala_loss, all-true mask": (".venv", "impl_tf"),
    "tf_vtrace pipeline loss call": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in fit": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in tf_keras fit": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in jit fit": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in tf_keras jit fit": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in fit, 16 steps per call": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in jit fit, 16 steps per call": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call": (".venv", "impl_tf"),
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call, legacy SGD":
        (".venv", "impl_tf"),
})
# Environment a worker needs (tf_keras replaces Keras 3 only when this is set
# before TensorFlow is imported).
WORKER_ENV = {name: {"TF_USE_LEGACY_KERAS": "1"} for name in (
    "tf_vtrace ImpalaLoss in tf_keras fit", "tf_vtrace ImpalaLoss in tf_keras jit fit",
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call",
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call, legacy SGD")}
BEFORE = " (before)"  # suffix of the rows run from the --baseline checkout
BASELINE_ROOT = None  # set by --baseline
REFERENCE = "tf_vtrace"
PEER = "rlax"  # the fastest peer so far: every row is also compared with it
BASE_POINT = (100, 256)
SCALING_POINTS = ((100, 256), (300, 256), (1000, 256), (100, 1024), (100, 4096))
# key -> (workload, T, B); key names are what the tables print.
CASES = {
    "iw_100x256": ("importance_weights", 100, 256),
    "iw_20x32": ("importance_weights", 20, 32),
    "learner_100x256": ("learner_step", 100, 256),
}
BASE_CASES = tuple(CASES)
for _T, _B in SCALING_POINTS[1:]:
    CASES[f"iw_{_T}x{_B}"] = ("importance_weights", _T, _B)


def runs_case(name, key):
    return _base_name(name) in SCALING_IMPLEMENTATIONS or key in BASE_CASES


def _base_name(name):
    return name[:-len(BEFORE)] if name.endswith(BEFORE) else name


def _root(name):
    """The checkout a worker runs from: a "(before)" row's is the baseline's."""
    return BASELINE_ROOT if name.endswith(BEFORE) else REPO_ROOT


def _python(name):
    return os.path.join(REPO_ROOT, IMPLEMENTATIONS[_base_name(name)][0], "bin", "python")


def _worker_command(name, *extra):
    module = IMPLEMENTATIONS[_base_name(name)][1]
    # Run as a module from the checkout root (cwd), as every benchmark is.
    return [_python(name), "-m", "benchmarks.peers.worker", module, _base_name(name),
            *extra]


class WorkerProcess:
    """A long-lived worker: one implementation, requests over a pipe."""

    def __init__(self, name):
        self.name = name
        self.process = subprocess.Popen(
            _worker_command(name), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, cwd=_root(name),
            env=dict(os.environ, **WORKER_ENV.get(_base_name(name), {})))

    def wait_ready(self):
        return self._read()

    def request(self, op, **kwargs):
        self.send(op, **kwargs)
        return self._read()

    def send(self, op, **kwargs):
        """Sends a request; `reply` reads its answer (workers work meanwhile)."""
        self.process.stdin.write(json.dumps(dict(op=op, **kwargs)) + "\n")
        self.process.stdin.flush()

    def reply(self):
        return self._read()

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name!r} died; rerun it by hand: "
                               f"{' '.join(_worker_command(self.name))}")
        return json.loads(line)

    def close(self):
        self.process.stdin.write(json.dumps({"op": "exit"}) + "\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)


def baseline_root(checkout):
    """A directory whose `benchmarks` is this checkout's and whose
    `tf_vtrace` is `checkout`'s: a "(before)" worker runs from there."""
    root = tempfile.mkdtemp(prefix="tf_vtrace_baseline_")
    os.symlink(os.path.join(REPO_ROOT, "benchmarks"), os.path.join(root, "benchmarks"))
    library = os.path.join(os.path.abspath(checkout), "tf_vtrace")
    if not os.path.isdir(library):
        raise SystemExit(f"--baseline {checkout}: no tf_vtrace package there")
    os.symlink(library, os.path.join(root, "tf_vtrace"))
    return root


def selected_implementations(only, baseline):
    """The implementations to run: `only` (and the references) or all; with
    a `baseline` checkout, each tf_vtrace row once more from there."""
    names = [name for name in IMPLEMENTATIONS
             if not only or name in only or name in (REFERENCE, PEER)]
    unknown = set(only or ()) - set(IMPLEMENTATIONS)
    if unknown:
        raise SystemExit(f"unknown implementations: {sorted(unknown)}")
    if baseline:
        names += [name + BEFORE for name in names if name.startswith(REFERENCE)]
    return names


def start_workers(names):
    """Start every worker at once (imports overlap), then wait for each."""
    workers = {name: WorkerProcess(name) for name in names}
    for worker in workers.values():
        worker.wait_ready()
    return workers


def setup_cases(workers, cases):
    """Build + compile `cases` in every worker; returns case -> {name: outputs path}."""
    outputs = {}
    for key in cases:
        workload, T, B = CASES[key]
        outputs[key] = {}
        # Every worker traces and compiles at once: the compiles overlap.
        pending = [(name, worker) for name, worker in workers.items()
                   if runs_case(name, key)]
        for _, worker in pending:
            worker.send("setup", key=key, workload=workload, T=T, B=B)
        for name, worker in pending:
            reply = worker.reply()
            if reply["supported"]:
                outputs[key][name] = reply["outputs"]
        print(f"  compiled {key}", file=sys.stderr, flush=True)
    return outputs


def max_abs_diffs(output_paths):
    """Per implementation: max |output - tf_vtrace's output| over all outputs."""
    def load(path):
        with np.load(path) as data:
            return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]

    reference = load(output_paths[REFERENCE])
    return {name: max(float(np.max(np.abs(np.asarray(a, np.float64) - b)))
                      for a, b in zip(load(path), reference))
            for name, path in output_paths.items()}


def time_cases(workers, outputs, rounds, budget_s):
    """case -> {name: median µs}, implementations alternating within each case."""
    medians = {}
    for key in outputs:
        runners = {name: (lambda w, k: lambda n: w.request("time", key=k, n=n)["times"])(
            workers[name], key) for name in outputs[key]}
        medians[key] = harness.interleaved_medians(runners, rounds, budget_s)
        print(f"  timed {key}", file=sys.stderr, flush=True)
    return medians


def probe_fresh_processes(names):
    """First-call latency + per-call peak memory, one fresh process per implementation.

    MALLOC_MMAP_THRESHOLD_ pins glibc's mmap threshold so large freed buffers go
    back to the OS; otherwise a warm process reuses its free lists and the
    resident-memory high-water mark would not move.
    """
    points = ",".join(f"{T}x{B}" for T, B in SCALING_POINTS)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    results = {}
    for name in names:
        completed = subprocess.run(
            _worker_command(name, "--probe", points), capture_output=True, text=True,
            env=env, cwd=REPO_ROOT, check=False)
        if completed.returncode != 0:
            raise RuntimeError(f"probe of {name!r} failed:\n{completed.stderr[-3000:]}")
        results[name] = json.loads(completed.stdout.strip().splitlines()[-1])
        print(f"  probed {name}", file=sys.stderr, flush=True)
    return results


def case_table(medians, diffs):
    rows = []
    for key in BASE_CASES:
        reference, peer = medians[key][REFERENCE], medians[key][PEER]
        for name, us in sorted(medians[key].items(), key=lambda item: item[1]):
            rows.append((key, name, harness.fmt_us(us), harness.fmt_ratio(us, reference),
                         harness.fmt_ratio(us, peer),
                         "(not V-trace)" if name == "floor" else f"{diffs[key][name]:.1e}"))
    return harness.format_table(
        ("case", "implementation", "us/call", "vs tf_vtrace", f"vs {PEER}", "max|diff|"),
        rows)


def scaling_table(medians, probes):
    header = ["implementation"] + [f"{T}x{B}" for T, B in SCALING_POINTS]
    time_rows, memory_rows = [], []
    for name in (n for n in SCALING_IMPLEMENTATIONS if n in probes):
        keys = [f"iw_{T}x{B}" for T, B in SCALING_POINTS]
        time_rows.append([name] + [harness.fmt_us(medians[k].get(name)) for k in keys])
        memory_rows.append([name] + [f"{probes[name]['memory_mib'][f'{T}x{B}']:.1f}"
                                     for T, B in SCALING_POINTS])
    return (harness.format_table(header, time_rows),
            harness.format_table(header, memory_rows))


def latency_table(probes):
    rows = [(name, f"{probes[name]['import_s']:.2f}", f"{probes[name]['first_call_s']:.3f}")
            for name in SCALING_IMPLEMENTATIONS if name in probes]
    return harness.format_table(("implementation", "import s", "first call s"), rows)


def _verdict(met):
    return "met" if met else "MISSED"


def targets(medians):
    lines = []
    for key in ("iw_100x256", "learner_100x256"):
        ours = medians[key][REFERENCE]
        peers = {n: us for n, us in medians[key].items()
                 if n != "floor" and not n.startswith(REFERENCE)}
        fastest = min(peers, key=peers.get)
        lines.append(f"{key}: tf_vtrace {ours:,.0f} us vs fastest peer {fastest} "
                     f"{peers[fastest]:,.0f} us: faster than every peer: "
                     f"{_verdict(ours < peers[fastest])}")
    learner = medians["learner_100x256"]
    for name in sorted(n for n in learner if n.startswith(REFERENCE)):
        ratio = learner[name] / learner[PEER]
        lines.append(f"learner_100x256: {name} / {PEER} = {ratio:.2f}x"
                     + (f" (target < 1.0x: {_verdict(ratio < 1.0)})"
                        if name == REFERENCE else ""))
    floor = medians["iw_100x256"].get("floor")
    for name, goal in ((REFERENCE, 1.3), ("tf_vtrace in user plain fn", 1.2)):
        if floor is None or name not in medians["iw_100x256"]:
            continue
        ratio = medians["iw_100x256"][name] / floor
        lines.append(f"iw_100x256: {name} / floor = {ratio:.2f}x (target <= {goal}x: "
                     f"{_verdict(ratio <= goal)})")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--base-only", action="store_true",
                        help=f"only {', '.join(BASE_CASES)}: no scaling, no probes")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run these implementations (and tf_vtrace, rlax) only")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the tf_vtrace rows from this checkout")
    args = parser.parse_args(argv)
    global BASELINE_ROOT
    if args.baseline:
        BASELINE_ROOT = baseline_root(args.baseline)
    names = selected_implementations(args.only, args.baseline)
    cases = BASE_CASES if args.base_only else tuple(CASES)
    rounds, budget_s = (2, 0.02) if args.quick else (7, 0.12)
    started = time.perf_counter()
    for T, B in {CASES[key][1:] for key in cases}:
        harness.load_inputs(T, B)  # written once, before any worker reads them

    probes = None
    if not args.base_only:
        print("first-call latency and memory (fresh processes)...", file=sys.stderr,
              flush=True)
        probes = probe_fresh_processes([n for n in SCALING_IMPLEMENTATIONS if n in names])
    print("starting workers...", file=sys.stderr, flush=True)
    workers = start_workers(names)
    try:
        outputs = setup_cases(workers, cases)
        medians = time_cases(workers, outputs, rounds, budget_s)
    finally:
        for worker in workers.values():
            worker.close()
    diffs = {key: max_abs_diffs(paths) for key, paths in outputs.items()}

    sections = [
        "Median us per call; iw = from_importance_weights, learner = 18-action logits ->"
        " log-probs -> V-trace -> IMPALA loss -> gradients (TxB):\n" + case_table(medians, diffs)]
    if probes is not None:
        time_text, memory_text = scaling_table(medians, probes)
        sections += [
            "Scaling, from_importance_weights, median us per call (TxB):\n" + time_text,
            "Scaling, peak resident memory above the warm baseline during a call, MiB (TxB):\n"
            + memory_text,
            "First call in a fresh process (import excluded; trace + compile + run):\n"
            + latency_table(probes)]
    print("\n\n".join(sections + ["Targets:\n" + targets(medians)]))
    print(f"\n(total {time.perf_counter() - started:.0f} s)")
    results = "peers_base.json" if args.base_only else "peers.json"
    with open(os.path.join(harness.RESULTS_DIR, results), "w") as out:
        json.dump({"medians": medians, "diffs": diffs, "probes": probes,
                   "scaling_points": SCALING_POINTS}, out, indent=1)


if __name__ == "__main__":
    main()
