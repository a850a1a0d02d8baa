"""Decoded blocks of on-disk carrays, shared by the whole process and bounded in bytes (an LRU).

A scalar read from disk costs positioned reads and a block decode; reading it again should cost a
dictionary look-up.  Keys carry a generation number that the owning carray renews whenever it may have
changed, so stale blocks are never found again and simply age out.
"""

import itertools
import os
import threading
from collections import OrderedDict

LIMIT_BYTES = 64 * 1024 * 1024

_generations = itertools.count(1)


def new_generation():
    """A number no key made before can hold."""
    return next(_generations)


class BlockCache:
    def __init__(self, limit=LIMIT_BYTES):
        self.limit = limit
        self.nbytes = 0
        self._d = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        # without the lock: each OrderedDict call is atomic under the GIL, and a block evicted by
        # another thread between the two calls is simply not moved (put keeps the byte count locked)
        d = self._d
        v = d.get(key)
        if v is not None:
            try:
                d.move_to_end(key)
            except KeyError:
                pass
        return v

    def put(self, key, block):
        if block.nbytes > self.limit // 4:
            return
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._d[key] = block
            self.nbytes += block.nbytes
            while self.nbytes > self.limit and self._d:
                _, gone = self._d.popitem(last=False)
                self.nbytes -= gone.nbytes

    def clear(self):
        with self._lock:
            self._d.clear()
            self.nbytes = 0


disk_blocks = BlockCache()


def _after_fork_in_child():
    # a forked child starts with an empty cache and a free lock (a parent thread may have held it)
    disk_blocks._lock = threading.Lock()
    disk_blocks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
