"""The learner's update and the actor's unroll, alone and in two threads.

The ``"thread"`` backend runs the actor and the learner as two threads of
one interpreter. Here each works on its own in a loop (the learner on one
real unroll, `Learner.update`; the actor `LocalActor.collect`), with no
queue between them: first each alone, then both at once, `--seconds` each,
at the demo's sizes (16 envs × 20 steps, CartPole-v1). Both at once, each
is slowed by the other's turns at the interpreter lock, not by the cores:
the CPU seconds per wall second say how much of the two cores they used.
Prints one JSON line: ms per update and per unroll in each phase, and the
CPU use.

    python -m benchmarks.experiments.thread_contention --seconds 3
"""

import argparse
import json
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _learner_and_actor():
    from tf_vtrace.agent import actor as actor_lib
    from tf_vtrace.agent import envs
    from tf_vtrace.agent import learner as learner_lib
    from tf_vtrace.agent.config import Config
    config = Config(env_id="CartPole-v1")
    space, action_space = envs.env_spaces(config.env_id)
    learner = learner_lib.Learner(config, space, envs.head_sizes(action_space))
    actor = actor_lib.LocalActor(config)
    actor.set_weights(learner.get_weights(), 0)
    return learner, actor


def _run(workers, seconds):
    """Runs each named loop body in its own thread for `seconds`; returns
    ms per iteration of each and the CPU seconds per wall second."""
    stop, counts = threading.Event(), dict.fromkeys(workers, 0)

    def loop(name):
        while not stop.is_set():
            workers[name]()
            counts[name] += 1

    threads = [threading.Thread(target=loop, args=(name,)) for name in workers]
    wall, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = {f"{name}_ms": round(1e3 * wall / max(n, 1), 3)
              for name, n in counts.items()}
    result["cpu_per_wall_s"] = round(cpu / wall, 2)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.)
    args = parser.parse_args()
    learner, actor = _learner_and_actor()
    unroll = actor.collect()
    for _ in range(20):  # compile, warm up
        learner.update(unroll)
        actor.collect()
    update = {"update": lambda: learner.update(unroll)}
    collect = {"unroll": actor.collect}
    print(json.dumps({
        "learner_alone": _run(update, args.seconds),
        "actor_alone": _run(collect, args.seconds),
        "both": _run(dict(update, **collect), args.seconds)}))
    actor.close()


if __name__ == "__main__":
    main()
