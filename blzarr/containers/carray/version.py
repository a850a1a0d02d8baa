"""Which committed version of its directory an on-disk carray shows (`CarrayVersions`, a part of
`carray`), and publishing a new one.

A carray that reads a directory another process may write (opened with mode 'r', with mode 'a'
before its first write, or closed) holds a `commitrec.Watch`.  Every public read call first asks it
whether a writer committed since the state in memory was loaded and, if so, loads the committed
state again (`_reload`): length, the chunk store (file descriptors and chunk caches included), the
short last chunk, the statistics (so plans, which are keyed by them, too) and a new generation for
the decoded-block cache.  A call then reads one committed version, the latest before it began.  The
writer (holding the directory's lock) needs no check; each of its flushes bumps the record
(`_publish`).

Threads share one object, so its state is never swapped under a call in flight: calls count
themselves in and out under the object's version lock (`pin_version`), and a reload happens only
when none is in flight; a call that starts beside one reads the version that one reads.  The store
swaps its state in place (`adopt`) and leaves the descriptors that reads in flight hold open until
they are done."""

import functools

import numpy as np

from blzarr.query import stats as _stats
from blzarr.storage import commitrec
from blzarr.storage.arraymeta import ArrayMeta
from blzarr.containers.carray.read import (READ_AGAIN, CarrayBase, pin_version, read_again,
                                           spanned_too_often, unpin_version)
from blzarr.storage.layouts import open_chunks, open_dir
from blzarr.runtime import forksafe


class CarrayVersions(CarrayBase):
    """Loading the committed version of an on-disk carray again, and publishing one."""

    _watch = None           # None: in memory, on object storage, or the writer holding the lock
    _pinned = 0             # public calls in flight (on any thread): no reload while > 0
    _vlock = None           # guards _pinned and reloads (a column of a watched table shares the table's)
    _recw = None            # the writer's commitrec.Writer

    def _start_watching(self):
        """Watch the directory for commits by other processes, from the state about to be loaded
        (call before reading meta/sizes)."""
        if self._bytestore is not None or self._rootdir is None:
            return None
        w = commitrec.Watch(self._rootdir, check_fp=True)
        state = w.current()
        if self._vlock is None:
            self._vlock = forksafe.RLock()
        forksafe.counts_calls(self)
        self._watch = w
        return state

    def _watch_layout(self, fmt):
        """Scalar reads of a directory in the bcolz layout look at meta/sizes too, now and then: the
        real bcolz may write it beside this reader without bumping the commit record."""
        if self._watch and fmt != "blz":
            self._watch.poll_sizes()

    _owner = None           # the column of a table: a weak reference to it, which loads its columns

    def _fresh(self):
        """Load the committed state again when another process committed since it was loaded (a
        column of a table asks its table, which keeps its columns at one length)."""
        w = self._watch
        if w is None or self._pinned:
            return
        owner = self._owner
        table = owner() if owner is not None else None
        if table is not None and table._watch:
            table._fresh()
        elif w.changed():
            with self._vlock:
                # checked again under the lock: a call of another thread may have started (it reads
                # the version loaded: so does this call), or loaded the new version meanwhile
                if not self._pinned and w.changed():
                    self._reload()

    def _reload(self):
        with self._lock:
            w = self._watch
            if w is None:
                return
            state = w.current()
            fresh = open_dir(self._rootdir, "r", None)
            meta = ArrayMeta.read(fresh, self._rootdir, self.__dict__.get("_allow_pickle", False))
            if meta.atom != self._atom or meta.chunklen != self._chunklen:
                self._setup(meta.atom, meta.cparams, meta.chunklen, meta.dflt, meta.expectedlen)
            nchunks, nleft = self._split(meta.length)
            # the same directory object reads from now on (metalayer objects handed out hold it);
            # its descriptors are dropped, so files replaced since (compaction) are opened again,
            # and reads in flight on other threads finish on the ones they hold
            store = self._chunks.adopt(fresh)
            self._chunks = open_chunks(store, self._rootdir, "r", self._chunk_atom, self._chunklen, nchunks,
                                       nchunks + (1 if nleft else 0), self._isobj)
            self._len = self._opened_len = meta.length
            self._nleft = nleft
            self._last = np.zeros((0 if self._isobj else self._chunklen,) + self._atom.shape,
                                  dtype=self._atom.base)
            if nleft:
                self._load_leftover(nchunks, nleft)
            self._blockcache = None
            if self.__dict__.get("_stats_v") is not None:      # (the old file need not be read)
                self._stats = _stats.ChunkStats(self._atom, self._chunklen)
                self._load_stats(nchunks)
            attrs = self.__dict__.get("_attrs")
            if attrs is not None:
                attrs.reload()
            self._dirty = False
            w.accept(state)

    def _publish(self):
        """Bump the commit record: what this writer flushed is now what readers load."""
        if self._bytestore is not None or self._rootdir is None:
            return
        rec = self._recw
        if rec is None:
            rec = self._recw = commitrec.Writer(self._rootdir)
        rec.bump(self._len)

    def _stop_publishing(self):
        rec = self.__dict__.pop("_recw", None)
        if rec is not None:
            rec.close()


def fresh_call(method):
    """`method` of a carray or ctable as a public read call: the committed version is loaded first
    when another process committed since (and no call of another thread is in flight), and neither
    the calls it makes nor other threads load again until it returns."""
    def call(self, *args, **kwargs):
        if not self._watch:
            return method(self, *args, **kwargs)
        # read.read_one_version's loop, inline: a call through it costs small calls such as len()
        # about 0.1 us more (3%)
        for attempt in range(READ_AGAIN):
            lock = pin_version(self)
            try:
                out = method(self, *args, **kwargs)
                again = read_again(self, attempt)
            finally:
                unpin_version(self, lock)
            if not again:
                return out
        return spanned_too_often(self, out)
    # the method's name, module and docstring (its module's doctests find it there)
    return functools.update_wrapper(call, method)
