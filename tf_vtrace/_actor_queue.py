"""The bounded queue between acting threads and the one thread that learns.

Both thread-and-queue actors stand on it: the agent's thread backend
(`tf_vtrace.agent.backends.ThreadActors`) and the actor that feeds
`model.fit` (`tf_vtrace.keras_training.ActorThread`). The actors put
unrolls in, blocking while the queue is full; the learner takes them out in
the order they were put, blocking while it is empty. Neither side blocks
for good: every wait looks every `TICK_S` seconds whether to give up, an
actor when the queue is stopped, the learner when no actor is left to fill
it.
"""

import queue
import threading

# How often a blocked put, get or wait looks whether to give up (seconds).
TICK_S = 0.1


class ActorQueue:
    """A FIFO of at most `capacity` items whose waits can be given up.

    Args:
      capacity: Items it holds before `put` waits.
    """

    def __init__(self, capacity):
        self._queue = queue.Queue(maxsize=capacity)
        self._stop = threading.Event()
        self._put_back = None  # Returned first by the next get (`put_back`).

    def stop(self):
        """Every `put` and `wait`, running or to come, gives up."""
        self._stop.set()

    def stopped(self):
        return self._stop.is_set()

    def wait(self, event):
        """Waits for `event`; False if the queue is stopped first."""
        while not self._stop.is_set():
            if event.wait(TICK_S):
                return True
        return False

    def put(self, item):
        """Queues `item`, waiting while the queue is full; False (not
        queued) if the queue is stopped first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=TICK_S)
                return True
            except queue.Full:
                pass
        return False

    def get(self, producers_alive, on_tick=None):
        """The next item, waiting while there is none; None once
        `producers_alive()` is false and nothing is queued.

        Args:
          producers_alive: A function: whether an actor may still put.
          on_tick: None, or a function called at every tick the wait goes
            on (it may raise to end the wait).
        """
        if self._put_back is not None:
            item, self._put_back = self._put_back, None
            return item
        while True:
            try:
                return self._queue.get(timeout=TICK_S)
            except queue.Empty:
                if not producers_alive() and self._queue.empty():
                    return None
                if on_tick is not None:
                    on_tick()

    def get_nowait(self):
        """The next item if there is one now, else None."""
        if self._put_back is not None:
            item, self._put_back = self._put_back, None
            return item
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def put_back(self, item):
        """Makes `item` (one just taken) the next one any get returns."""
        self._put_back = item

    def qsize(self):
        """The items queued (an item put back not counted)."""
        return self._queue.qsize()

    def drain(self):
        """Takes every item left, the one put back first."""
        items = []
        while (item := self.get_nowait()) is not None:
            items.append(item)
        return items
