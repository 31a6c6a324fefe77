"""Draw benchmarks/results/performance_scaling.png from benchmarks/results/peers.json.

Runs in .venv-bench-torch (matplotlib lives there, not in the main venv).
Left: time per call against T (B=256); middle: against B (T=100), both
log-log, so linear growth is a slope-1 line. Right: per-call peak memory
against the number of elements T*B on linear axes, beside the size of the
outputs alone (readings under ~1 MiB are within the page-granular noise).
"""

import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
RESULTS = os.path.join(BENCH_DIR, "results", "peers.json")
OUTPUT = os.path.join(BENCH_DIR, "results", "performance_scaling.png")


def series(results, name, points):
    keys = [f"{T}x{B}" for T, B in points]
    times = [results["medians"][f"iw_{k}"].get(name) for k in keys]
    memory = [results["probes"][name]["memory_mib"][k] for k in keys]
    return times, memory


def main():
    with open(RESULTS) as handle:
        results = json.load(handle)
    points = [tuple(p) for p in results["scaling_points"]]
    by_t = sorted((p for p in points if p[1] == 256), key=lambda p: p[0])
    by_b = sorted((p for p in points if p[0] == 100), key=lambda p: p[1])
    by_size = sorted(points, key=lambda p: p[0] * p[1])
    fig, (ax_t, ax_b, ax_mem) = plt.subplots(1, 3, figsize=(15, 4.5))
    for name in results["probes"]:
        style = dict(marker="o", linewidth=2.5 if name == "tf_vtrace" else 1.2,
                     linestyle="--" if name == "floor" else "-", label=name)
        ax_t.plot([T for T, _ in by_t], series(results, name, by_t)[0], **style)
        ax_b.plot([B for _, B in by_b], series(results, name, by_b)[0], **style)
        ax_mem.plot([T * B / 1000 for T, B in by_size], series(results, name, by_size)[1], **style)
    sizes = [T * B for T, B in by_size]
    ax_mem.plot([n / 1000 for n in sizes], [8 * n / 2**20 for n in sizes],
                color="black", linestyle=":",
                label="outputs alone (vs + pg_adv, float32)")
    ax_t.set(title="time per call vs T (B=256)", xlabel="T", ylabel="median µs per call")
    ax_b.set(title="time per call vs B (T=100)", xlabel="B", ylabel="median µs per call")
    ax_mem.set(title="peak memory per call vs T·B", xlabel="T·B (thousands of elements)",
               ylabel="MiB above warm baseline", xlim=(0, None), ylim=(0, None))
    for ax, ticks in ((ax_t, [T for T, _ in by_t]), (ax_b, [B for _, B in by_b])):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    for ax in (ax_t, ax_b, ax_mem):
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=8)
    ax_mem.legend(fontsize=7)
    fig.suptitle("V-trace from_importance_weights scaling (2-core AMD EPYC, CPU)")
    fig.tight_layout()
    fig.savefig(OUTPUT, dpi=90)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
