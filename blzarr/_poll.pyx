# cython: language_level=3, boundscheck=False, wraparound=False
"""The polled view of a commit-record watch (`blzarr.storage.commitrec`): the check of a warm scalar
read in a directory that a writer which never bumps the record may change, in C, so that it costs
that read a few dozen instructions rather than a Python call."""

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC


cdef inline long long _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)      # the vDSO: no system call
    return <long long>ts.tv_sec * 1000000000LL + ts.tv_nsec


cdef class PolledView:
    """Item 1 is the record's generation (`watch._mv[1]`; the loaded one, `watch.seen`, where there
    is no record) while `watch.changed()` found nothing, and that check is made at most once per
    `every` nanoseconds of the monotonic clock (or of `clock()`, where given: tests move it); once it
    finds a change, item 1 is -2, which no generation is, until a later check finds none."""

    cdef public object watch
    cdef public object clock
    cdef public long long every
    cdef public long long due

    def __init__(self, watch, long long every, clock=None):
        self.watch = watch
        self.every = every
        self.clock = clock
        self.due = 0

    def __getitem__(self, i):
        cdef long long now = _now_ns() if self.clock is None else self.clock()
        w = self.watch
        if now >= self.due:
            self.due = now + self.every
            if w.changed():
                self.due = 0            # looked at again by the next read, until a load accepts it
                return -2
        m = w._mv
        return m[i] if m is not None else w.seen
