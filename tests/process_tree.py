"""Finding the actor processes a training process spawned (Linux /proc)."""
import glob


def _read(path):
    """The file's text, or "" when its process or thread exited between
    listing and reading (threads come and go while TF runs)."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def actor_pids(parent):
    """PIDs of the spawned actor processes of process `parent` (not
    multiprocessing's resource tracker, not zombies)."""
    pids = []
    for children in glob.glob(f"/proc/{parent}/task/*/children"):
        for pid in _read(children).split():
            if "spawn_main" in _read(f"/proc/{pid}/cmdline"):
                pids.append(int(pid))
    return pids
