"""What a `carray` and a `ctable` share as containers (`Container`, a base of both): the settings
kept from their constructor as read-only properties, the ``with`` statement, NumPy's ``__array__``,
the first lines of their repr, and taking the directory's write lock at the first write; and how
sizes are shown (`compression_ratio`, `human_readable_size`)."""

from blzarr.storage.locking import lock_dir


def compression_ratio(nbytes, cbytes):
    """``nbytes / cbytes``: the compression ratio of a carray or ctable (bcolz's), NaN when `cbytes`
    is 0.  The repr, ``info`` and the command line's ``info`` and ``ls`` all show this one."""
    return nbytes / cbytes if cbytes else float("nan")


def human_readable_size(n):
    """bcolz's style: '123' for bytes, then '1.21 KB', 'MB', 'GB', 'TB'."""
    for unit, scale in (("TB", 2 ** 40), ("GB", 2 ** 30), ("MB", 2 ** 20), ("KB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n}"


class Container:
    """The behaviour `carray` and `ctable` have in common; `_kind` is the name messages give them."""

    _kind = "container"

    @property
    def len(self):
        return self._len

    def __len__(self):
        return self._len

    @property
    def cparams(self):
        return self._cparams

    @property
    def rootdir(self):
        return self._rootdir

    @property
    def mode(self):
        return self._mode

    @property
    def attrs(self):
        return self._attrs

    def __enter__(self):
        return self

    def __sizeof__(self):
        return self.cbytes

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError(f"a {self._kind} cannot be viewed as a NumPy array without a copy")
        a = self[:]
        return a if dtype is None else a.astype(dtype, copy=False)

    def _repr_text(self, sep, more=""):
        # bcolz's repr: carray writes "nbytes := ...", ctable "nbytes: ..."; `more` follows the cparams
        nb, cb = self.nbytes, self.cbytes
        s = (f"{self._kind}({self.shape}, {self.dtype})\n"
             f"  nbytes{sep} {human_readable_size(nb)}; cbytes{sep} {human_readable_size(cb)}; "
             f"ratio: {compression_ratio(nb, cb):.2f}\n"
             f"  cparams := {self._cparams!r}\n{more}")
        if self._rootdir:
            s += f"  rootdir := '{self._rootdir}'\n  mode    := '{self._mode}'\n"
        return s + str(self)

    def _become_writer(self, load):
        """Take the directory's write lock, then ``load()`` (the container's own checks and reloads
        of what other processes committed since it was opened) and read the attributes again; the
        lock is given back when any of it raises.  Afterwards this object is the only writer."""
        lock = lock_dir(self._rootdir)
        try:
            load()
            self._attrs.reload()
            self._attrs.mode = "a"
        except BaseException:
            lock.release()
            raise
        self._dirlock = lock
        self._watch = None          # the lock holder is the only writer: nothing to watch
        self._first_write = self._attrs._first_write = None
