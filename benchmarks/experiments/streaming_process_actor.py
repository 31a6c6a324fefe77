"""A process actor that streams unrolls instead of answering requests.

The ``"process"`` backend asks its worker for one unroll at a time: the
worker acts, sends the unroll, and waits for the learner's next request
(which carries the weights). Both sides then wait on each hand-off
(docs/records/performance.md: 23–35 % idle each). Here the worker acts without
waiting for a request. It holds credits, one per unroll that it may send
ahead, and it takes the newest weights the learner has sent whenever it
starts an unroll (without blocking for them). The learner grants a credit
as it takes each unroll, trains on the unroll, and sends its new weights.

The learner's idle time is its waits for an unroll; the actor's is the
time it was not acting (waiting for a credit, sending, receiving), as the
library's process backend counts it. This script
measures the protocol; it is not the library's backend. The demo's sizes
are used: 16 envs × 20 steps, CartPole-v1, the default Config.

Prints one JSON line per run: the learner's and the actor's idle
fractions over the run after `--warm` updates, the mean policy lag, and
the learner steps and env steps per second.

    python -m benchmarks.experiments.streaming_process_actor --updates 940 --credits 2
"""

import argparse
import json
import multiprocessing
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _actor_process(connection, credits):
    """Acts until told to stop; sends ("unroll", unroll, acting_s) each
    time. The actor is the process backend's own (`_RemoteActor`: one
    TensorFlow thread, `acting_s` the seconds to set the weights and act)."""
    from tf_vtrace.agent.backends import _remote
    from tf_vtrace.agent.config import Config
    actor = _remote._RemoteActor(Config(env_id="CartPole-v1"), seed_offset=0)
    latest, held = None, None

    def handle(message):
        nonlocal credits, latest
        if message is None:
            return False
        if message[0] == "credit":
            credits += 1
        else:
            latest = message[1:]
        return True

    while True:
        while connection.poll(0) or credits == 0 or latest is None:
            if not handle(connection.recv()):  # Blocks only without credits.
                return
        version, weights = latest
        unroll, acting_s = actor.unroll(weights if version != held else None, version)
        held = version
        credits -= 1
        connection.send(("unroll", unroll, acting_s))


def run(updates, credits, warm):
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    from tf_vtrace.agent.config import Config
    config = Config(env_id="CartPole-v1")
    space, action_space = envs.env_spaces(config.env_id)
    learner = learner_lib.Learner(config, space, envs.head_sizes(action_space))
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    worker = context.Process(target=_actor_process, args=(there, credits), daemon=True)
    worker.start()
    here.send(("weights", 0, learner.get_weights()))
    learner_idle = acting = 0.
    lags = []
    try:
        for update in range(updates):
            if update == warm:
                learner_idle = acting = 0.
                start = time.perf_counter()
            waited = time.perf_counter()
            _, unroll, acting_s = here.recv()
            learner_idle += time.perf_counter() - waited
            acting += acting_s
            here.send(("credit",))
            result = learner.update(unroll)
            lags.append(result.diagnostics["policy_lag"])
            here.send(("weights", result.version, result.weights))
        wall = time.perf_counter() - start
    finally:
        here.send(None)
        worker.join(10)
        if worker.is_alive():
            worker.kill()
    timed = updates - warm
    return {"credits": credits, "updates_timed": timed,
            "learner_idle": round(learner_idle / wall, 3),
            # As the library's backends count it: not acting (unrolls
            # counted as they arrive, so off by at most `credits` unrolls).
            "actor_idle": round(1 - acting / wall, 3),
            "policy_lag_mean": round(sum(lags[warm:]) / timed, 2),
            "learner_steps_per_s": round(timed / wall, 1),
            "env_steps_per_s": round(timed * config.steps_per_update / wall),
            "load": os.getloadavg()[0]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=940)
    parser.add_argument("--credits", type=int, default=2)
    parser.add_argument("--warm", type=int, default=50)
    flags = parser.parse_args(argv)
    print(json.dumps(run(flags.updates, flags.credits, flags.warm)))


if __name__ == "__main__":
    main()
