"""What a BLZ store keeps in memory, and its bounds: open file descriptors, the parsed state of the
superchunk files, chunk headers, verified chunks, chunks remembered as verified or touched lately
(`BlzCaches`, a part of `BlzDir`; `_LRU`, the byte-bounded cache of chunk headers and chunks)."""

import threading
from collections import OrderedDict

from blzarr.errors import StorageError, storage_error

_MB = 1024 * 1024
# bounds of the store's caches
FD_CACHE = 8                      # open file descriptors
FILE_STATE_CACHE = 256            # parsed headers + offsets tables
HEAD_CACHE_BYTES = 4 * _MB        # chunk headers + bstarts
CHUNK_CACHE_BYTES = 32 * _MB      # verified compressed chunks
VERIFIED_CACHE = 1 << 16          # chunks remembered as verified
TOUCHED_CACHE = 64                # chunks read lazily lately (a second touch reads and caches them whole)
FINGERPRINT_CACHE = 1 << 16       # fingerprints of the chunks written lately
WRITEBACK_BYTES = 1 * _MB         # appended bytes whose writeback starts at once (when flushes sync)
WRITEBACK_PAGE = 4096             # the hinted ranges end on a multiple of this (a page)
READ_RETRIES = 8                  # reads by a reader (mode 'r') that saw a chunk change under it


class _LRU:
    """A byte-bounded LRU of chunk index -> bytes, each entry tagged with the epoch of its file's state:
    an entry whose file was reloaded since (changed, or evicted and read again) is a miss."""

    def __init__(self, limit):
        self.limit = limit
        self.nbytes = 0
        self._d = OrderedDict()

    def get(self, n, epoch):
        e = self._d.get(n)
        if e is None:
            return None
        if e[0] != epoch:
            self.pop(n)
            return None
        self._d.move_to_end(n)
        return e[1]

    def put(self, n, epoch, data):
        self.pop(n)
        if len(data) > self.limit // 2:
            return
        self._d[n] = (epoch, data)
        self.nbytes += len(data)
        while self.nbytes > self.limit and len(self._d) > 1:
            self.nbytes -= len(self._d.popitem(last=False)[1][1])

    def pop(self, n):
        e = self._d.pop(n, None)
        if e is not None:
            self.nbytes -= len(e[1])

    def clear(self):
        self._d.clear()
        self.nbytes = 0

    def __len__(self):
        return len(self._d)


class BlzCaches:
    """The caches of a `BlzDir` (descriptors, file states, chunks) and what drops them."""

    # ------------------------------------------------------------------ files and their state
    def _fd(self, fno):
        fd = self._fds.get(fno)
        if fd is not None:
            self._fds.move_to_end(fno)
            return fd
        key = self._key(fno)
        try:
            fd = self._fio.open(key, "r" if self.mode == "r" else "rw")
        except FileNotFoundError:
            raise StorageError(f"superchunk file '{self._fio.where(key)}' is missing") from None
        except OSError as e:
            raise storage_error(e, f"cannot open superchunk file '{self._fio.where(key)}'") from None
        self._fds[fno] = fd
        if len(self._fds) > FD_CACHE:
            # close the least recently used descriptors no lazy read is using outside the lock (never the
            # one just opened, which the caller is about to use)
            for k in [k for k in self._fds if k != fno and not self._inuse.get(self._fds[k])][:len(self._fds) - FD_CACHE]:
                self._fio.close(self._fds.pop(k))
        return fd

    # A read outside the lock borrows the descriptor it uses (`_borrow`, `_release_fd`, both with the
    # lock held), counted by descriptor, not by file: the store may meanwhile drop the descriptor
    # (`_close`, `close`) or take another version's state (`adopt`).  A descriptor dropped while
    # borrowed is retired, not closed: its last release closes it, so a read in flight never reads
    # through a closed descriptor, or through its number reused for another file.
    def _borrow(self, fd):
        self._inuse[fd] = self._inuse.get(fd, 0) + 1

    def _release_fd(self, fd):
        """One unlocked user of the descriptor `fd` less (call with the lock held)."""
        left = self._inuse[fd] - 1
        if left:
            self._inuse[fd] = left
            return
        del self._inuse[fd]
        fio = self._retired.pop(fd, None)
        if fio is not None:
            fio.close(fd)

    def _retire(self, fd):
        """Close `fd` now, or at the last release of the reads that borrowed it."""
        if self._inuse.get(fd):
            self._retired[fd] = self._fio
        else:
            self._fio.close(fd)

    def _close(self, fno):
        fd = self._fds.pop(fno, None)
        if fd is not None:
            self._retire(fd)

    def close(self):
        with self._lock:
            if getattr(self, "_pending", None):
                self.sync()         # rewrites are switched (durably) before the descriptors go
            while self._fds:
                self._retire(self._fds.popitem()[1])

    # what stays the store's own when it takes the state of another (`adopt`): the lock and the
    # bookkeeping of reads in flight, which hold this store, not the other
    _OWN = ("_lock", "_first_write", "_inuse", "_retired", "_local")

    def adopt(self, fresh):
        """Take, in place, the state of `fresh`, a store of the same directory opened just now (a
        reader loading a newer version, a writer's first write): the objects that hold this store read
        the new state from now on; reads in flight on other threads finish on the descriptors and file
        states they took (their descriptors are closed when the last of them is done)."""
        with self._lock:
            self.close()
            state = {k: v for k, v in fresh.__dict__.items() if k not in self._OWN}
            fresh._fds = type(state["_fds"])()      # its descriptors are this store's now
            self.__dict__.update(state)

    def _current(self, f):
        """Whether `f` is still the state of its file this store knows (a read that took it before a
        reload or a swap must not put what it read into the caches of the new state)."""
        return self._files.get(f.fno) is f

    def _close_all(self):
        """Close every descriptor, the retired ones too (nothing can read through this store any more:
        it is being collected)."""
        BlzCaches.close(self)
        retired = self.__dict__.get("_retired") or {}
        while retired:
            fd, fio = retired.popitem()
            fio.close(fd)

    def __del__(self):
        try:
            self._close_all()
        except Exception:
            pass

    def _file(self, fno):
        """The state of file `fno`, reloaded when the file changed behind our back (never while it has
        rewrites waiting for their offsets switch: the state in memory is the truth then)."""
        return self._reads.file(self, fno)

    def _forget_file(self, fno):
        """Drop what is known of file `fno` (its cached chunks become misses: their epoch is gone)."""
        self._files.pop(fno, None)
        lo, hi = (fno - 1) * self.superchunklen, fno * self.superchunklen
        for n in [n for n in self._ctbytes if lo <= n < hi]:
            del self._ctbytes[n]
        for n in [n for n in self._fps if lo <= n < hi]:
            del self._fps[n]
        self._reads.forget_file(self, fno)

    def _remember(self, n, data, f):
        f.verified.add(n)
        if len(f.verified) > VERIFIED_CACHE:
            f.verified.clear()
            f.verified.add(n)
        self._ctbytes[n] = len(data)
        self._chunks.put(n, f.epoch, data)
        self._reads.remembered(self, n, data, f)

    def _scratch(self):
        """A per-thread reusable buffer for lazy chunks."""
        local = self._local
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(0)
        return buf

    def drop_caches(self):
        with self._lock:
            self._heads.clear()
            self._chunks.clear()
            self._touched.clear()
            self._local = threading.local()

    def _drop_chunk(self, n):
        self._heads.pop(n)
        self._chunks.pop(n)
        self._ctbytes.pop(n, None)
        self._fps.pop(n, None)
        f = self._files.get(n // self.superchunklen + 1)
        if f is not None:
            f.verified.discard(n)
        self._reads.dropped(self, n)
