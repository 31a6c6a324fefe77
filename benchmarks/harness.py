"""Shared timing harness for every V-trace benchmark.

Framework-free (standard library + NumPy only) because it is imported by the
workers in every venv: the main TensorFlow one, the JAX one and the PyTorch one.
It provides:

* the shared random inputs (one seed, saved once as .npz so each process reads
  identical arrays),
* an interleaved timer that alternates implementations in rounds, because the
  machine is shared and noisy: a slow spell then hits every implementation
  instead of just the one that happened to be running,
* peak-memory probes and plain-text table formatting.
"""

import argparse
import functools
import gc
import os
import statistics
import time

import numpy as np

NUM_ACTIONS = 18
SEED = 20180205  # IMPALA's arXiv date; any fixed value works.
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Arrays every implementation reads; names follow the tf_vtrace signature.
INPUT_KEYS = (
    "log_rhos", "discounts", "rewards", "values", "bootstrap_value",
    "behaviour_logits", "target_logits", "actions",
)


def make_inputs(T, B, num_actions=NUM_ACTIONS, seed=SEED):
    """Time-major [T, B] V-trace inputs, float32, deterministic in (T, B, seed).

    Discounts are 0.99 with ~1% episode ends so the recursion is cut now and
    then, as in real trajectories. log_rhos spread over roughly [-1, 1] so the
    rho and c clips are active on part of the batch.
    """
    rng = np.random.default_rng([seed, T, B, num_actions])
    f32 = np.float32
    behaviour_logits = rng.normal(size=(T, B, num_actions)).astype(f32)
    target_logits = rng.normal(size=(T, B, num_actions)).astype(f32)
    return {
        "log_rhos": rng.uniform(-1.0, 1.0, size=(T, B)).astype(f32),
        "discounts": (0.99 * (rng.uniform(size=(T, B)) > 0.01)).astype(f32),
        "rewards": rng.normal(size=(T, B)).astype(f32),
        "values": rng.normal(size=(T, B)).astype(f32),
        "bootstrap_value": rng.normal(size=(B,)).astype(f32),
        "behaviour_logits": behaviour_logits,
        "target_logits": target_logits,
        "actions": rng.integers(0, num_actions, size=(T, B)).astype(np.int32),
    }


def inputs_path(T, B):
    return os.path.join(RESULTS_DIR, f"inputs_T{T}_B{B}.npz")


def load_inputs(T, B):
    """Inputs for (T, B) from the shared .npz, creating it on first use."""
    path = inputs_path(T, B)
    if not os.path.exists(path):
        os.makedirs(RESULTS_DIR, exist_ok=True)
        tmp_path = path + f".{os.getpid()}.tmp.npz"
        np.savez(tmp_path, **make_inputs(T, B))
        os.replace(tmp_path, path)  # atomic: concurrent readers never see half a file
    with np.load(path) as data:
        return {key: data[key] for key in INPUT_KEYS}


# ---------------------------------------------------------------- timing


def time_calls(fn, num_calls):
    """Per-call wall times in microseconds; `fn` must block until its result exists."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection landing inside one implementation's calls is noise
    try:
        times_us = []
        for _ in range(num_calls):
            start = time.perf_counter()
            fn()
            times_us.append((time.perf_counter() - start) * 1e6)
        return times_us
    finally:
        if gc_was_enabled:
            gc.enable()


def interleaved_medians(runners, rounds, budget_s_per_round):
    """Median µs per call for each named runner, alternating runners in rounds.

    `runners` maps a name to `run(num_calls) -> list of µs` (a local `time_calls`
    or a call into a worker process). The number of calls per round is fixed per
    runner from a first calibration call so that every round of every runner
    takes about the same wall time; the order within a round rotates so no
    implementation always runs right after the same neighbour.
    """
    names = list(runners)
    calls = {name: _calibrate(runners[name], budget_s_per_round) for name in names}
    samples = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].extend(runners[name](calls[name]))
    return {name: statistics.median(samples[name]) for name in names}


def rounds_and_budget(doc, rounds, budget_s_per_round):
    """Parses an experiment's command line (`--quick` only): its rounds and
    budget per round, or the smoke-run ones (2, 0.02) with `--quick`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="few iterations (smoke run)")
    return (2, 0.02) if parser.parse_args().quick else (rounds, budget_s_per_round)


def interleaved_call_medians(calls, rounds, budget_s_per_round):
    """`interleaved_medians` of in-process zero-argument calls, by name."""
    runners = {name: functools.partial(time_calls, call) for name, call in calls.items()}
    return interleaved_medians(runners, rounds, budget_s_per_round)


def _calibrate(run, budget_s):
    one_call_us = min(run(2))
    return int(min(2000, max(3, budget_s * 1e6 / max(one_call_us, 0.1))))


# ---------------------------------------------------------------- memory


def _status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_rss_delta_mib(fn, num_calls=3):
    """Peak resident memory above the pre-call level while `fn` runs, in MiB.

    Linux lets a process reset its high-water mark (VmHWM) by writing 5 to
    /proc/self/clear_refs, so one process can probe several sizes in turn. The
    caller should already have warmed `fn` (traced/compiled it) so that compile
    memory is not counted, and should run with MALLOC_MMAP_THRESHOLD_ fixed so
    freed buffers go back to the OS instead of hiding in malloc's free lists.
    Measures the transient working memory of a call: intermediates + outputs.
    """
    gc.collect()
    baseline_kib = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    for _ in range(num_calls):
        fn()
    return max(0, _status_kib("VmHWM") - baseline_kib) / 1024.0


# ---------------------------------------------------------------- output


def format_table(header, rows):
    """Plain-text, right-aligned table (docs use these verbatim, no Markdown code)."""
    cells = [list(map(str, header))] + [list(map(str, row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row):
        first = row[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def fmt_us(value):
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_ratio(value, reference):
    if value is None or reference is None:
        return "n/a"
    return f"{value / reference:.2f}x"
