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


def ignores(pid, signum):
    """Whether process `pid` ignores signal `signum` (its SigIgn mask; False
    when it has exited)."""
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def is_stopped(pid):
    """Whether process `pid` is stopped (by SIGSTOP: state T in its stat)."""
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rfind(")") + 2:][:1] == "T"


def actor_pids(parent):
    """PIDs of the spawned actor processes of process `parent` (not
    multiprocessing's resource tracker, not zombies)."""
    pids = []
    for children in glob.glob(f"/proc/{parent}/task/*/children"):
        for pid in _read(children).split():
            if "spawn_main" in _read(f"/proc/{pid}/cmdline"):
                pids.append(int(pid))
    return pids
