"""Finding the actor processes a training process spawned (Linux /proc)."""
import glob


def actor_pids(parent):
    """PIDs of the spawned actor processes of process `parent` (not
    multiprocessing's resource tracker, not zombies)."""
    pids = []
    for children in glob.glob(f"/proc/{parent}/task/*/children"):
        with open(children) as handle:
            for pid in handle.read().split():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        if b"spawn_main" in cmdline.read():
                            pids.append(int(pid))
                except OSError:
                    pass  # Exited meanwhile.
    return pids
