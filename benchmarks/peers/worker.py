"""One implementation in its own process, driven by run_peers.py.

    python -m benchmarks.peers.worker MODULE NAME            # serve timing requests
    python -m benchmarks.peers.worker MODULE NAME --probe P  # first call + memory, then exit

MODULE is one of the impl_* modules (impl_tf, impl_jax, impl_torch, impl_numpy)
and NAME the implementation inside it. Requests and replies are JSON lines on
stdin/stdout; anything the frameworks print is pushed to stderr so it cannot
corrupt the protocol.
"""

import importlib
import json
import os
import sys
import time

import numpy as np

from benchmarks import harness


def _protocol_stdout():
    """Keep a private handle on stdout, then point fd 1 at stderr."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return protocol


class Worker:
    def __init__(self, module, name):
        self.module, self.name = module, name
        self.calls = {}  # request key -> warm zero-argument callable

    def setup(self, key, workload, T, B):
        builder = self.module.BUILDERS.get(workload)
        if builder is None:
            return {"supported": False}
        call = builder(self.name, harness.load_inputs(T, B))
        if call is None:
            return {"supported": False}
        outputs = call()  # the first call traces / compiles
        call()
        if hasattr(call, "comparison_outputs"):  # e.g. a Keras step returns logs
            outputs = call.comparison_outputs()
        outputs = self.module.to_numpy(outputs)
        self.calls[key] = call
        path = os.path.join(harness.RESULTS_DIR, f"out_{_slug(self.name)}_{key}.npz")
        np.savez(path, *outputs)
        return {"supported": True, "outputs": path}

    def time(self, key, n):
        call = self.calls[key]
        steps = getattr(call, "steps_per_call", 1)  # e.g. Keras' steps_per_execution
        return {"times": [us / steps for us in harness.time_calls(call, n)]}

    def serve(self, requests, replies):
        for line in requests:
            request = json.loads(line)
            op = request.pop("op")
            if op == "exit":
                return
            replies.write(json.dumps(getattr(self, op)(**request)) + "\n")
            replies.flush()


def probe(module, name, points):
    """First-call latency at the first point (this process is fresh), then the
    per-call peak working memory at every point (see harness.peak_rss_delta_mib)."""
    result = {"first_call_s": None, "memory_mib": {}}
    for index, (T, B) in enumerate(points):
        builder = module.BUILDERS["importance_weights"]
        inputs = harness.load_inputs(T, B)
        start = time.perf_counter()
        call = builder(name, inputs)
        call()
        if index == 0:
            result["first_call_s"] = time.perf_counter() - start
        call()
        result["memory_mib"][f"{T}x{B}"] = harness.peak_rss_delta_mib(call)
    return result


def _slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def main():
    module_name, name = sys.argv[1], sys.argv[2]
    replies = _protocol_stdout()
    import_start = time.perf_counter()
    module = importlib.import_module(f"benchmarks.peers.{module_name}")
    module.preload(name)  # library imports are not part of first-call latency
    import_s = time.perf_counter() - import_start
    if "--probe" in sys.argv:
        points = [tuple(map(int, p.split("x")))
                  for p in sys.argv[sys.argv.index("--probe") + 1].split(",")]
        result = dict(probe(module, name, points), import_s=import_s)
        replies.write(json.dumps(result) + "\n")
        return
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    Worker(module, name).serve(sys.stdin, replies)


if __name__ == "__main__":
    main()
