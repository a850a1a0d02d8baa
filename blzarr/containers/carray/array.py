"""`carray`: a compressed, chunked, enlargeable array, in memory or on disk (bcolz-compatible API)."""

import contextlib
import threading
import warnings
import math
import operator
import os
import secrets

import numpy as np

from blzarr.storage import fileio, intent, readpins, replace
from blzarr import _chunk
from blzarr.runtime import integrations
from blzarr.runtime import forksafe
from blzarr.query import lazyexpr
from blzarr.query import stats as _stats
from blzarr.containers.arrayprint import array2string
from blzarr.containers.common import Container, compression_ratio, human_readable_size  # noqa: F401
from blzarr.storage.attrs import attrs as _attrs
from blzarr.storage.chunk import blosc_typesize
from blzarr.errors import ENVIRONMENT_ERRNOS, BlzarrError, ConcurrentWriterError, FormatError, MissingError, StorageError, storage_error, storage_op
from blzarr.runtime.params import cparams as _cparams, defaults
from blzarr.storage.chunkstore import MemoryChunks
from blzarr.storage.layouts import create_store, open_chunks, open_dir
from blzarr.storage.locking import FirstWrite, lock_dir
from blzarr.storage.bytestore import is_url, local_path, open_bytestore
from blzarr.storage.files import (CREATING_FILE, META_DIR, ROOTDIRS_FILE, STORAGE_FILE, HeldTree, creation_marker,
                                   new_tree, new_tree_of, nothing_stored)
from blzarr.storage.arraymeta import ArrayMeta, dflt_from_json, dflt_to_json, parse_dtype  # noqa: F401
# the parts of carray, one module each (the moved names stay importable from here)
from blzarr.containers.carray.read import _PY_KINDS, CarrayBase, CarrayReads, _iter_blocks, operator_index  # noqa: F401
from blzarr.containers.carray.reduce import CarrayReductions
from blzarr.containers.carray.stats import LAZY as LAZY_STATS, CarrayStatistics
from blzarr.containers.carray.write import CarrayWrites, _UndoLog, retire  # noqa: F401
from blzarr.containers.carray.version import CarrayVersions, fresh_call
from blzarr.storage import commitrec

_MB = 1024 * 1024
_UNSET = object()


def calc_chunklen(expectedlen, atomsize):
    """The automatic chunk length: bcolz's rule, so files written by either line up."""
    mb = max(min(expectedlen * atomsize / _MB, 1e4), 1e-4)
    zone = int(math.log10(mb))
    chunksize = 4 * 1024 * int(2 ** (math.log10(10 ** zone) + 6))
    chunksize = chunksize // atomsize * atomsize
    return max(chunksize // atomsize, 1)


class _DamagedLast(np.ndarray):
    """The leftover buffer of a carray whose stored short last chunk cannot be read: indexing it (every
    read of those rows, every write that would change them) raises the read's error again."""

    def __new__(cls, buf, error):
        self = np.asarray(buf).view(cls)
        self._error = error
        return self

    def __array_finalize__(self, obj):
        self._error = getattr(obj, "_error", None)

    def _fail(self):
        e = self._error
        try:
            err = type(e)(*e.args)
        except Exception:
            err = FormatError(str(e))
        raise err

    def __getitem__(self, key):
        self._fail()

    def __setitem__(self, key, value):
        self._fail()


def _create_or_open(self, args, kwargs):
    """The verb of a constructor's StorageError: data or mode 'w' create, otherwise open."""
    data = args[0] if args else kwargs.get("array")
    return "create" if data is not None or kwargs.get("mode") == "w" else "open"


def _remove(path, how):
    """Remove what mode 'w' replaces; a failure names the directory and keeps the OS's reason."""
    try:
        how(path)
    except OSError as e:
        raise storage_error(e, f"cannot replace '{path}' (mode 'w' removes what it holds first)") from e


# object-storage URLs whose carray creation its caller completes (`creation_completed_by_caller`)
_deferred = threading.local()


@contextlib.contextmanager
def creation_completed_by_caller(url):
    """The carray the block creates at the object-storage `url` stays a creation in progress (its
    creation marker, no meta/storage) when its constructor returns: the caller fills it, flushes it
    and commits it with `commit_creation`, so that an interrupt while it fills leaves nothing there
    rather than a part of it.  (Nothing for a local path or None: a local creation is renamed into
    place whole.)"""
    if url is None or not is_url(os.fspath(url)):
        yield
        return
    urls = _deferred.__dict__.setdefault("urls", [])
    urls.append(os.fspath(url).rstrip("/"))
    try:
        yield
    finally:
        urls.pop()


def creation_left_to_caller(url):
    """Whether the dataset being created at the object-storage `url` is committed by its caller
    (inside `creation_completed_by_caller`), not by its constructor."""
    return url is not None and os.fspath(url).rstrip("/") in getattr(_deferred, "urls", ())


def commit_creation(a):
    """Commit the creation (of a carray or a ctable) that `creation_completed_by_caller` left to the
    caller, flushed first."""
    a.flush()
    a._commit_creation()


def _confirmed(store):
    """Whether the open just made through `store` read one version of the carray (`readpins.confirm`)."""
    pins = getattr(store, "pins", None)
    return pins is None or readpins.confirm(store, pins.commit_key, pins.version)


def _inside_a_creation(url):
    """Whether the carray created at the object-storage `url` is part of a dataset being created that
    covers it already: a column of a table being created (the table has its own creation marker) or
    the dataset built in a replacement's stage (which nothing names until its switch)."""
    parent, _, name = url.rstrip("/").rpartition("/")
    return replace.is_fresh(parent) or name.startswith(replace.STAGE_PREFIX)


class carray(CarrayVersions, CarrayStatistics, CarrayReductions, CarrayWrites, CarrayReads, CarrayBase,
             Container):
    """carray(array=None, cparams=None, dtype=None, dflt=None, expectedlen=None, chunklen=None,
    rootdir=None, mode='a', format=None, allow_pickle=False, safe=True, checksum='crc32', reserve=0,
    superchunklen=None, meta=None)

    A compressed and enlargeable array, in memory or on disk, chunked along its first axis.

    Parameters
    ----------
    array : array_like, optional
        The initial data.  Without it, `rootdir` is opened (or, with `dtype`, an empty array made).
    cparams : cparams or dict, optional
        Compression parameters; missing ones come from ``blzarr.defaults.cparams``.
    dtype : dtype, optional
        Force this dtype (rather than the one of `array`).
    dflt : scalar, optional
        The value that fills new elements when the array grows with `resize`.
    expectedlen : int, optional
        The expected final length; it chooses `chunklen` when that is not given.
    chunklen : int, optional
        Atoms per chunk.
    rootdir : str, optional
        A directory to persist the data in.
    mode : {'a', 'r', 'w'}
        'r' read-only, 'w' replace what is there, 'a' open an existing directory or create a missing one.
    format : {'bcolz', 'blz'}, optional
        The on-disk layout of a new directory (default ``blzarr.defaults.format``, 'blz' unless set); an existing one keeps its own.
        'blz' stores chunks in checksummed superchunk files with lazy block reads (docs/FORMAT.rst).
    checksum, reserve, superchunklen, meta
        'blz' only: the checksum of each chunk ('crc32' default, None, 'adler32', 'md5', 'sha1',
        'sha224', 'sha256', 'sha384', 'sha512'); bytes (or a fraction of a chunk) reserved after each
        chunk for in-place rewrites; chunks per superchunk file (automatic: files of tens of MB, fewer chunks when
        `expectedlen` needs fewer, at least 64: each file has an offsets table of 8 bytes a chunk);
        fixed-length metalayers written before the first chunk.
    allow_pickle : bool
        Opening a directory of object dtype unpickles its content, which can run code: only with True.

    Examples
    --------
    >>> import numpy as np, blzarr
    >>> a = blzarr.carray(np.arange(10))
    >>> a[3], a[-1], a[2:5].tolist()
    (3, 9, [2, 3, 4])
    >>> a.append([10, 11]); len(a)
    12
    """

    _kind = "carray"

    @storage_op(_create_or_open)
    def __init__(self, array=None, cparams=None, dtype=None, dflt=None, expectedlen=None,
                 chunklen=None, rootdir=None, mode="a", format=None, allow_pickle=False, safe=True,
                 checksum=_UNSET, reserve=0, superchunklen=None, meta=None, storage_options=None, **kwargs):
        if kwargs:
            raise TypeError(f"carray() got unexpected keyword arguments {sorted(kwargs)}")
        if hasattr(array, "__next__") and not hasattr(array, "__len__"):
            raise TypeError(f"carray() takes an array or a sequence, not a {type(array).__name__} (an "
                            "iterator): use blzarr.fromiter(iterable, dtype, count)")
        if mode not in ("r", "w", "a"):
            raise ValueError(f"mode must be 'r', 'w' or 'a', got {mode!r}")
        if format not in (None, "bcolz", "blz"):
            raise ValueError(f"format must be 'bcolz' or 'blz', got {format!r}")
        self._blz_opts = dict(checksum="crc32" if checksum is _UNSET else checksum, reserve=reserve,
                              superchunklen=superchunklen, meta=meta)
        self._format_arg = format
        self._mode = mode
        self._rootdir = local_path(os.fspath(rootdir)) if rootdir is not None else None
        self._bytestore = open_bytestore(self._rootdir, storage_options) \
            if self._rootdir is not None and (is_url(self._rootdir) or storage_options) else None
        if self._bytestore is not None:
            self._rootdir = self._bytestore.root
        target = self._bytestore, self._rootdir
        if self._rootdir is None and (meta or reserve or superchunklen or checksum is not _UNSET):
            raise ValueError("checksum=, reserve=, superchunklen= and meta= apply to on-disk carrays "
                             "in the 'blz' format (give a rootdir)")
        self._lock = forksafe.RLock()
        self._blockcache = None
        self.safe = safe
        if self._bytestore is not None and array is None and mode != "w":
            # object storage: opening tells whether it is there (no existence probe first)
            try:
                self._open(allow_pickle)
                self._track_writer()
                return
            except MissingError:
                if self._bytestore.exists(f"{META_DIR}/{STORAGE_FILE}"):
                    raise           # it is there, something else is missing: never replace it
            exists = False
        elif self._bytestore is not None:
            # one LIST tells a new URL (nothing there: no dataset to look for, nothing to remove)
            empty = self._bytestore.holds_nothing()
            self.__dict__["_prefix_empty"] = bool(empty)
            exists = not empty and self._bytestore.exists(f"{META_DIR}/{STORAGE_FILE}")
        else:
            exists = self._rootdir is not None and os.path.exists(self._rootdir)
        if array is not None and mode == "r" and self._rootdir is not None:
            # mode 'r' never writes: bcolz refuses this too (an OSError)
            raise StorageError(
                f"'{self._rootdir}' already exists and mode is 'r': open it without data, or pass "
                "mode='w' to replace it" if exists else
                f"cannot create '{self._rootdir}' with mode 'r' (it never writes): pass mode='w'")
        if array is None and exists and mode != "w":
            self._open(allow_pickle)
            self._track_writer()
            return
        if array is None and exists and mode == "w":
            # replace the content but keep the dtype and parameters of what is there (read only: the
            # new content is written beside it, then swapped in)
            self._mode = "r"
            self._open(True)
            self._mode = mode
            if dtype is None:
                dtype = self._atom.base
            array = np.empty((0,) + self._atom.shape, dtype=dtype)
            chunklen = chunklen or self._chunklen
            cparams = cparams or self._cparams
            self._format_arg = self._format_arg or self._chunks.format
            kept = self._chunks.storage_options() if self._chunks.format == self._format_arg else {}
            if kept:
                # keep the storage options of what is there unless new ones are given
                given = self._blz_opts
                self._blz_opts = dict(
                    given, checksum=kept["checksum"] if checksum is _UNSET else given["checksum"],
                    reserve=reserve or kept["reserve"], superchunklen=superchunklen or kept["superchunklen"])
        if self._rootdir is not None and not exists and mode == "r" and array is None:
            if self._bytestore is not None:
                raise MissingError(f"cannot open '{self._rootdir}' with mode 'r': it does not exist "
                                   f"({nothing_stored(self._bytestore)})")
            raise StorageError(f"cannot open '{self._rootdir}' with mode 'r': it does not exist")
        if array is None:
            if self._rootdir is not None and dtype is None:
                why = "" if self._bytestore is None else f"{nothing_stored(self._bytestore)}: "
                raise StorageError(f"'{self._rootdir}' does not exist ({why}pass an array or a dtype to create it)")
            if dtype is None:
                raise ValueError("carray() needs an array, or a rootdir to open, or a dtype")
            array = np.empty(0, dtype=dtype)
        if exists and mode == "a":
            raise StorageError(
                f"'{self._rootdir}' already exists and mode is 'a': use mode='w' to replace it, "
                "or open it (blzarr.open) and append")
        if self._bytestore is not None and mode == "w" and not replace.is_fresh(target[1]):
            self._bytestore, self._rootdir = target     # (a reader's open above may have followed a redirect)
            old = "carray" if exists else None if self.__dict__.get("_prefix_empty") \
                else "ctable" if self._bytestore.exists(ROOTDIRS_FILE) else None
            if old is not None:
                self._replace(old, array, cparams, dtype, dflt, expectedlen, chunklen, allow_pickle)
                self._track_writer()
                return
        self._create(array, cparams, dtype, dflt, expectedlen, chunklen)
        self._track_writer()

    @classmethod
    def _open_local(cls, rootdir, mode, allow_pickle):
        """The carray in the local directory `rootdir`, which `blzarr.open` just found holds one, opened
        with mode 'r' or 'a': what the constructor does for it, without the checks of the arguments
        given to create one and its existence probe (it raises as the constructor does)."""
        self = cls.__new__(cls)
        self._init_open(rootdir, mode, allow_pickle)
        return self

    @storage_op("open")
    def _init_open(self, rootdir, mode, allow_pickle):
        self._blz_opts = dict(checksum="crc32", reserve=0, superchunklen=None, meta=None)
        self._format_arg = None
        self._mode = mode
        self._rootdir = rootdir
        self._bytestore = None
        self._lock = forksafe.RLock()
        self._blockcache = None
        self.safe = True
        self._open(allow_pickle)
        self._track_writer()

    # ---------------------------------------------------------------- creation and opening
    def _setup(self, atom, cparams, chunklen, dflt, expectedlen, lazy_last=False):
        self._atom = atom
        self._isobj = atom.base.kind == "O"
        if self._isobj and atom.shape:
            raise TypeError("object carrays must be one-dimensional")
        if atom.itemsize == 0 and not self._isobj:
            raise TypeError(f"dtype {atom} has atoms of size zero")
        if atom.itemsize >= 2 ** 31:
            raise ValueError("atom size is too large (>= 2 GB)")
        self._cparams = cparams
        self._chunklen = int(chunklen)
        self._typesize = 1 if self._isobj else blosc_typesize(atom.base)
        # elements come out as Python scalars (as in bcolz) for these; NumPy ones for the rest
        self._pyscalars = not atom.shape and atom.kind in _PY_KINDS
        self._dflt = dflt
        self.expectedlen = int(expectedlen)
        # the uncompressed last chunk (object carrays store one pickled object a chunk: none);
        # `lazy_last` (an open): made at its first use (`_last`), which a read of other rows never makes
        if lazy_last:
            self.__dict__.update(_last_v=None, _last_due=())
        else:
            self._last = self._new_last()
        self._nleft = 0
        self._len = 0
        self._dirty = True     # something flush() must write (the leftover or the sizes)
        self._blockcache = None
        # per-chunk min/max/NaN of the full chunks (blzarr.query.stats), for the query planner
        # (an open makes the empty statistics at their first use too: `_stats`)
        has = not self._isobj and _stats.supported(atom)
        self._stats = (LAZY_STATS if lazy_last else _stats.ChunkStats(atom, self._chunklen)) if has else None

    def _create(self, array, cparams, dtype, dflt, expectedlen, chunklen):
        cp = _cparams.coerce(cparams)
        if isinstance(array, carray):
            array = array[:]
        if dtype is not None:
            dtype = np.dtype(dtype)
        if dtype is not None and dtype.hasobject and dtype != np.dtype(object):
            raise TypeError(f"dtype {dtype}: objects inside records or subarrays are not supported "
                            "(use dtype=object to store each record as one object)")
        if dtype == np.dtype(object) and not (isinstance(array, np.ndarray) and array.dtype == dtype
                                              and array.ndim == 1):
            # one object per item of the top-level sequence (tuples stay tuples, as in bcolz)
            items = list(array)
            array = np.empty(len(items), dtype=object)
            for i, v in enumerate(items):
                array[i] = v
        if not isinstance(array, np.ndarray):
            array = np.asarray(array, dtype=dtype)
        if dtype is None and array.dtype.hasobject and array.dtype != np.dtype(object):
            raise TypeError(f"dtype {array.dtype}: objects inside records are not supported "
                            "(pass dtype=object to store each record as one object)")
        elif dtype is not None and array.dtype != dtype and not (
                dtype.shape and dtype.base == array.dtype):
            array = array.astype(dtype.base if dtype.shape else dtype)
        if array.ndim == 0:
            array = array.reshape(1)     # a scalar makes a one-element carray, as in bcolz
        if dtype is not None and dtype.shape:
            array = np.ascontiguousarray(array, dtype=dtype.base).reshape((-1,) + dtype.shape)
        atom = np.dtype((array.dtype, array.shape[1:])) if array.ndim > 1 else array.dtype
        if expectedlen is None:
            expectedlen = len(array)
        elif isinstance(expectedlen, bool) or not isinstance(expectedlen, (int, np.integer, float)):
            raise TypeError(f"expectedlen must be an integer, got {expectedlen!r}")
        expectedlen = max(int(expectedlen), 0)
        if cp.quantize and atom.base.kind != "f":
            raise TypeError(f"the quantize filter works on floats only, not on dtype {atom.base}")
        if chunklen is None:
            chunklen = calc_chunklen(expectedlen, max(atom.itemsize, 1))
        elif isinstance(chunklen, bool) or not isinstance(chunklen, (int, np.integer)) or chunklen < 1:
            raise ValueError(f"chunklen must be a positive integer, got {chunklen!r}")
        if not atom.base.kind == "O" and int(chunklen) * atom.itemsize > _chunk.MAX_BUFFERSIZE:
            raise ValueError(f"chunklen {chunklen} makes chunks of {int(chunklen) * atom.itemsize} bytes, "
                             f"more than Blosc allows ({_chunk.MAX_BUFFERSIZE})")
        d = np.zeros((), dtype=atom.base)
        if dflt is not None:
            try:
                d[()] = dflt
            except (TypeError, ValueError) as e:
                raise ValueError(f"dflt {dflt!r} does not fit dtype {atom.base}: {e}") from None
        self._setup(atom, cp, chunklen, d, expectedlen)
        self._ondisk = False
        if self._stats is not None:
            self._stats.persist = self._bytestore is not None or self._rootdir is not None
        self._chunks = MemoryChunks(chunk_nbytes=-1 if self._isobj else self._chunklen * self._chunk_atom.itemsize)
        tree = stage = old_lock = None
        marked = False
        if self._bytestore is not None:
            # object storage: no lock (one writer at a time), what is there is replaced.  Nothing can
            # be renamed into place there, so the commit object (meta/storage, which every open reads
            # first) is put last, after the first flush, and until then the creation marker says that
            # the objects under the prefix are a creation's, not a dataset (docs/FORMAT.rst)
            if not self.__dict__.pop("_prefix_empty", False):
                self._bytestore.remove_all()
            marked = not _inside_a_creation(self._rootdir)
            if marked:
                self._bytestore.put(CREATING_FILE, creation_marker("carray"))
            self._chunks = self._create_store()
            self._ondisk = True
        elif self._rootdir is not None:
            # the new directory is written beside the target, under a hidden name, and renamed (or
            # swapped, blzarr.storage.intent) into place once complete: an interrupt leaves what was there
            final = self._rootdir
            old_lock = self.__dict__.pop("_dirlock", None)
            if old_lock is None and os.path.isdir(final) and not os.path.islink(final):
                old_lock = lock_dir(final)      # never replace what another process writes
            stage = None if intent.inside_stage(final) else intent.stage_path(final)
            if stage is None and os.path.lexists(final):
                # inside a directory being built (a table's column): nothing there is promised yet
                _remove(final, fileio.rmtree if os.path.isdir(final) and not os.path.islink(final)
                        else fileio.unlink)
            self._rootdir = stage or final
            # nothing in the new directory is promised before its first flush writes meta/sizes: its
            # files are written in place and synced together then (files.NewTree)
            # (inside a directory built whole, `files.HeldTree`, that tree syncs everything at its end)
            tree = (None if isinstance(new_tree_of(self._rootdir), HeldTree)
                    else new_tree(self._rootdir, renamed=stage is not None))
            try:
                self._chunks = self._create_store()
                self._ondisk = True
                self._dirlock = lock_dir(self._rootdir)
                # the lock holder is the only writer: nothing to watch (a watch begun on what was at
                # the path before, e.g. to keep its format, would see the new directory as a change)
                self._watch = None
                self._write_storage()
                # the commit record is made by the creation's flush (its first bump), before the
                # directory is published: one write, not synced (it is not a commit point)
                self._recw = commitrec.Writer(self._rootdir, new=True)
            except BaseException:
                if tree is not None:
                    tree.close()
                self._rootdir = final
                if old_lock is not None:
                    old_lock.release()
                if stage is not None and os.path.lexists(stage):
                    fileio.rmtree(stage, ignore_errors=True)
                raise
        try:
            self._attrs = _attrs(self._rootdir, "a", _new=True, path=self._chunks.attrs_path)
            if len(array):
                self._append(array)
            mode, self._mode = self._mode, "a"  # a new carray is written whole (in memory, even with 'r')
            try:
                self.flush()
            finally:
                self._mode = mode
            if self._bytestore is not None:
                self._creation_marked = marked
                if not creation_left_to_caller(self._rootdir):
                    self._commit_creation()
            if stage is not None:
                self._publish_stage(stage, final)
        except BaseException as e:
            if stage is not None:
                self._rootdir = final
                self.__dict__.pop("_dirlock", None)
                intent.abandon(stage, e)
            raise
        finally:
            if tree is not None:
                tree.close()
            if old_lock is not None:
                old_lock.release()
        if mode == "r" and self.__dict__.get("_dirlock") is not None:
            self._dirlock.release()
        self._chunks.mode = self._mode if self._ondisk else "a"
        self._attrs.mode = self._mode

    def _commit_creation(self):
        """Object storage: put meta/storage, the commit of this carray's creation, and delete its
        creation marker (once: later calls do nothing)."""
        marked = self.__dict__.pop("_creation_marked", None)
        if marked is None:
            return
        self._write_storage(uid=secrets.token_hex(8))
        if marked:
            self._bytestore.delete(CREATING_FILE)

    def _replace(self, old_kind, array, cparams, dtype, dflt, expectedlen, chunklen, allow_pickle):
        """Object storage, a dataset (an `old_kind`) stored at the URL: the new carray is written whole
        in a stage under its prefix and switched in (blzarr.storage.replace), then opened here."""
        opts = self._bytestore.storage_options

        def make(url):
            return carray(array, cparams=cparams, dtype=dtype, dflt=dflt, expectedlen=expectedlen,
                          chunklen=chunklen, rootdir=url, mode="w", format=self._format_arg,
                          allow_pickle=allow_pickle, safe=self.safe, storage_options=opts, **self._blz_opts)
        replace.build(self._rootdir, self._bytestore, make, lambda: None, kind=old_kind)
        mode, self._mode = self._mode, "a"
        self._open(allow_pickle)
        self._mode = mode

    def _publish_stage(self, stage, final):
        """Put the complete directory `stage` this carray was just written in at `final`, and go on
        writing there.  The rename moves the directory itself: its files, and the lock taken on it
        as the stage, stay this carray's, so nothing is opened again or read back (the store's
        descriptors are closed first, as a directory with files open in it may not be renamed
        everywhere; they reopen at the next use)."""
        self._chunks.close_dir()
        intent.publish(stage, final)
        self._rootdir = final
        self._chunks.moved_to(final)
        lock = self.__dict__.get("_dirlock")
        if lock is not None:
            lock.path = final
        rec = self.__dict__.get("_recw")
        if rec is not None:
            rec.path = commitrec.record_path(final)     # (its descriptor: the same file)
        self._opened_len = self._len
        self._attrs.moved_to(final, self._chunks.attrs_path)

    def _new_last(self):
        """A zeroed leftover buffer: a chunk's worth of atoms."""
        return np.zeros((0 if self._isobj else self._chunklen,) + self._atom.shape, dtype=self._atom.base)

    def _last_buffer(self):
        """The leftover buffer, made now if an open left it to its first use."""
        buf = self.__dict__.get("_last_v")
        if buf is None:
            buf = self.__dict__["_last_v"] = self._new_last()
        return buf

    @property
    def _chunk_atom(self):
        return np.dtype("u1") if self._isobj else self._atom

    def _create_store(self):
        fmt = self._format_arg or defaults.format
        return create_store(self._rootdir, fmt, atom=self._chunk_atom, chunklen=self._chunklen,
                            objects=self._isobj, dtype=str(self._atom.base), atom_shape=self._atom.shape,
                            typesize=self._typesize, cparams=self._cparams.to_dict(), opts=self._blz_opts,
                            bytestore=self._bytestore, expectedlen=max(self.expectedlen, 0))

    def _open(self, allow_pickle):
        store, root = self._bytestore, self._rootdir
        if store is None or self._mode == "w" or readpins.is_deferred():
            return self._open_once(allow_pickle)
        # object storage: the open reads several objects one after the other; it is made again when
        # a writer changed the carray's commit object meanwhile (storage.readpins)
        for _ in range(readpins.OPEN_TRIES):
            store.pins = None
            store._primed.clear()
            self._bytestore, self._rootdir = store, root
            try:
                self._open_once(allow_pickle)
            except Exception:
                if _confirmed(self._bytestore):
                    raise
                continue                # (what failed was read across a change)
            if _confirmed(self._bytestore):
                return
        raise ConcurrentWriterError(f"'{root}' changed while it was being opened, {readpins.OPEN_TRIES} times "
                                    "(another writer replaced or rewrote it): open it again")

    def _open_once(self, allow_pickle):
        self._allow_pickle = allow_pickle
        # mode 'a' reads as mode 'r' does (no lock, nothing repaired or changed) until the first call
        # that writes: `_start_writing` takes the lock then (bcolz readers open with the default mode)
        lazy = self._mode == "a" and self._bytestore is None
        if self._mode != "r" and not lazy and self._bytestore is None and os.path.isdir(self._rootdir):
            # one writer process at a time (mode 'r' takes no lock); the lock is the directory's
            self._dirlock = lock_dir(self._rootdir)
        mode = "r" if lazy else self._mode
        # a reader (mode 'r', or 'a' before its first write) watches for commits by other processes
        seen = self._start_watching() if mode == "r" else None
        try:
            store = open_dir(self._rootdir, mode, self._bytestore)
        except replace.Moved as m:
            # a reader of a carray being replaced on object storage reads the new one where it was
            # built (blzarr.storage.replace)
            self._bytestore, self._rootdir = m.store, m.store.root
            store = open_dir(self._rootdir, mode, self._bytestore)
        if seen is not None:
            self._watch_layout(store.format)
        meta = ArrayMeta.read(store, self._rootdir, allow_pickle, store.__dict__.pop("opened_meta", None))
        atom, chunklen = meta.atom, meta.chunklen
        try:
            self._setup(atom, meta.cparams, chunklen, meta.dflt, meta.expectedlen, lazy_last=True)
        except (TypeError, ValueError) as e:
            raise FormatError(f"{meta.where_storage} (with {meta.where_sizes}): {e}") from None
        length = meta.length
        nchunks, nleft = self._split(length)
        self._chunks = open_chunks(store, self._rootdir, mode, self._chunk_atom, chunklen, nchunks,
                                   nchunks + (1 if nleft else 0), self._isobj)
        self._ondisk = True
        self._len = length
        self._opened_len = length
        self._nleft = nleft
        if nleft:
            self._load_leftover(nchunks, nleft)
        self._load_stats(nchunks)
        self._attrs = _attrs(self._rootdir, mode, path=self._chunks.attrs_path)
        self._dirty = False
        if seen is not None:
            self._watch.accept(seen)
        if lazy:
            gate = FirstWrite(self._start_writing)
            self._first_write = self._attrs._first_write = gate
            self._chunks.gate_writes(gate)
        if self._mode == "w":
            self._mode = "a"
            self._chunks.mode = "a"
            self._attrs.mode = "a"
            self.resize(0)
            self._mode = "w"

    def _load_leftover(self, nchunks, nleft):
        """The stored short last chunk read now (the bytes of the version being loaded: a writer may
        fill that chunk in place later) and decoded into the leftover buffer at its first use
        (`_last`): a read of other rows needs none of it."""
        try:
            c = self._chunks.load(nchunks, -1)
        except (BlzarrError, OSError) as e:
            self._damaged_leftover(e)
            return
        self.__dict__["_last_due"] = (c, nchunks, nleft)

    def _damaged_leftover(self, e):
        if getattr(e, "errno", None) in ENVIRONMENT_ERRNOS:
            raise e     # a full disk, a permission: the file is not damaged, nothing to salvage
        # damage stays where it is: the array opens, its other rows read, and every read (or
        # write) of these rows raises this error, which names the file, the chunk and its rows
        self._last = _DamagedLast(self._last_buffer(), e)

    def _decode_leftover(self, c=None, nchunks=0, nleft=0):
        """The `nleft` atoms of the short last chunk `c` (chunk `nchunks`) into the leftover buffer.

        The chunk stored there may hold more atoms than meta/sizes counts (up to a full chunk): a
        writer stores new data before the sizes that make it visible, so after a crash (or while it
        writes) the chunk can be ahead of meta/sizes.  The first `nleft` atoms are the ones counted.
        """
        buf = self._last_buffer()
        if c is None:
            return          # (no short last chunk: the buffer only)
        isz = self._atom.itemsize
        try:
            if c.nbytes == nleft * isz:
                c.decompress(buf[:nleft])
                return
            if c.nbytes % isz or not nleft * isz < c.nbytes <= self._chunklen * isz:
                where = getattr(c, "_where", None) or f"chunk {nchunks}"
                raise FormatError(f"the last chunk ({where}) holds {c.nbytes} bytes, but meta/sizes "
                                  f"'{self._chunks.meta_path('sizes')}' counts {nleft} atoms of {isz} "
                                  "bytes there")
            buf[:nleft] = c.decompress()[:nleft]
        except (BlzarrError, OSError) as e:
            self._damaged_leftover(e)

    def _truncate_view(self, n):
        """Show only the first `n` atoms without touching the files (a ctable opened after a crash
        whose columns were not all flushed presents the rows every column holds)."""
        if n >= self._len:
            return
        self._last      # the stored short chunk decoded (if due) before the chunks change under it
        self._blockcache = None
        if self._isobj:
            keep_full, newleft = n, 0
        else:
            keep_full, newleft = divmod(n, self._chunklen)
        if keep_full < len(self._chunks):
            if newleft:
                self._last[:newleft] = self._chunks[keep_full].decompress()[:newleft]
            self._chunks.set_nchunks(keep_full)
            if self._stats is not None:
                self._stats.truncate(keep_full)
        self._nleft = newleft
        self._len = n

    # ---------------------------------------------------------------- metadata
    def _write_storage(self, uid=None):
        meta = ArrayMeta(self._atom, self._cparams, self._chunklen, self.expectedlen, self._dflt)
        if uid is None:
            meta.write_storage(self._chunks)
        else:
            # on object storage, a random id of this creation: a carray written over another one
            # never has the same meta/storage, which readers opened before compare (storage.readpins)
            self._chunks.write_meta("storage", dict(meta.storage(), uid=uid))

    def _write_sizes(self):
        ArrayMeta.write_sizes(self._chunks, self.shape, self.nbytes, self.cbytes)

    def _read_meta(self):
        """What the metadata files of an on-disk carray hold, as bcolz's ``carray._read_meta()`` gives
        them: ``(shape, cparams, dtype, dflt, expectedlen, cbytes, chunklen)``, read from meta/sizes
        and meta/storage (what was last flushed), not from this object.  bcolz has no other way to
        read the stored `expectedlen`, so applications' tests call it (odo's)."""
        if self._rootdir is None:
            raise TypeError("_read_meta() reads the metadata files of an on-disk carray; this carray "
                            "is in memory")
        store = self._chunks
        sizes, storage = store.read_meta("sizes"), store.read_meta("storage")
        meta = ArrayMeta.read(store, self._rootdir, True, {"sizes": sizes, "storage": storage})
        return (tuple(sizes["shape"]), meta.cparams, meta.atom.base, storage.get("dflt"),
                meta.expectedlen, sizes.get("cbytes"), meta.chunklen)

    # ---------------------------------------------------------------- properties
    @property
    def dtype(self):
        """The dtype of the elements (the base dtype, as NumPy reports it)."""
        return self._atom.base

    @property
    def shape(self):
        return (self._len,) + self._atom.shape

    @property
    def ndim(self):
        return 1 + len(self._atom.shape)

    # ---------------------------------------------------------------- comparisons
    # Element-wise, as NumPy's (bcolz compared identities: `a == 3` was False, `a > 3` a TypeError).
    # The answer is a lazy boolean expression: a mask for a[...], reduced (.sum()) in one pass, or
    # made an array by np.asarray / [:].  A carray stays hashable (identity), unlike an ndarray.
    __hash__ = object.__hash__

    def _compare(self, other, symbol, op):
        if isinstance(other, (list, tuple)):
            other = np.asarray(other)
        if self._isobj or self._atom.shape or self._atom.kind in "SUV" or (
                isinstance(other, np.ndarray) and other.dtype.kind in "OSUV"):
            return op(self[:], other[:] if isinstance(other, CarrayBase) else other)   # NumPy's answer
        if isinstance(other, (np.ndarray, CarrayBase)) and other.shape != self.shape and other.ndim:
            raise ValueError(f"operands could not be broadcast together with shapes {self.shape} "
                             f"{tuple(other.shape)}")
        try:
            out = lazyexpr.LazyExpr(f"a {symbol} b", {"a": self, "b": other})
        except Exception as e:
            raise TypeError(f"cannot compare a carray of {self.dtype} with {other!r} by {symbol!r}: "
                            f"{e}") from None
        if other is self and symbol in ("==", "!="):
            # weak references (WeakSet, WeakKeyDictionary) compare their referents with == and take
            # its truth: a carray is itself (the values of `a == a` stay element-wise)
            out._truth = symbol == "=="
        return out

    def __eq__(self, other):
        return self._compare(other, "==", operator.eq)

    def __ne__(self, other):
        return self._compare(other, "!=", operator.ne)

    def __lt__(self, other):
        return self._compare(other, "<", operator.lt)

    def __le__(self, other):
        return self._compare(other, "<=", operator.le)

    def __gt__(self, other):
        return self._compare(other, ">", operator.gt)

    def __ge__(self, other):
        return self._compare(other, ">=", operator.ge)

    @property
    def size(self):
        # a NumPy integer, as bcolz's np.prod(shape)
        return np.prod(self.shape, dtype=np.int64)

    @property
    def itemsize(self):
        return self._atom.base.itemsize

    @property
    def atomsize(self):
        return self._atom.itemsize

    @property
    def nbytes(self):
        """The size of the data uncompressed, in bytes: ``len(c) * c.atomsize``, NumPy's ``c[:].nbytes``
        (for ``dtype=object``: the bytes of the pickles).  bcolz's meaning."""
        if self._isobj:
            return sum(c.nbytes for c in self._chunks)
        return self._len * self._atom.itemsize

    @property
    def cbytes(self):
        """The size of the compressed data, in bytes, as bcolz counts it: the compressed chunks plus the
        buffer of the last, partial chunk, which stays uncompressed and is counted whole
        (``chunklen * atomsize``), so a carray shorter than one chunk has ``cbytes > nbytes``.

        The compression ratio is ``nbytes / cbytes`` (`compression_ratio`), in the repr, `info` and
        ``blzarr info``/``ls`` alike; the bytes a directory takes on disk (``blzarr info``'s "on
        disk") also count metadata, attributes, checksums and file headers."""
        return self._chunks.cbytes + (0 if self._isobj else self._last.nbytes)

    @property
    def chunklen(self):
        return self._chunklen

    @property
    def dflt(self):
        return self._dflt

    @property
    def format(self):
        """'bcolz' or 'blz' for on-disk carrays, None in memory."""
        return self._chunks.format

    @property
    def chunkstore(self):
        """The chunk store beneath (`blzarr.storage.chunkstore.ChunkStore`): memory, bcolz layout or BLZ."""
        return self._chunks

    @property
    def store(self):
        """Deprecated name of `chunkstore`, kept for code written against blzarr 0.1's first docs."""
        warnings.warn("carray.store is now carray.chunkstore", DeprecationWarning, stacklevel=2)
        return self._chunks

    @property
    def _layoutdir(self):
        # the layout's directory object (None in memory), for tests that look at the files
        return self._chunks.layoutdir

    @property
    def meta(self):
        """Fixed-length metalayers ('blz' format): added before the first chunk, updated at equal size."""
        return self._chunks.meta

    @property
    def vlmeta(self):
        """Variable-length metalayers ('blz' format): any JSON value or bytes, stored compressed."""
        return self._chunks.vlmeta

    def verify(self):
        """Check every chunk on disk (checksums in the 'blz' format, structure in both); raise on damage."""
        self.flush()
        return self._chunks.verify(len(self._chunks) + bool(self._nleft))

    @storage_op("compact")
    def compact(self):
        """'blz' format: reclaim the space left by chunks rewritten elsewhere; returns the bytes freed."""
        self._check_writable()
        self.flush()
        st = self._stats
        if st is not None and not st.checked:
            st.check(self._chunks, len(self._chunks))   # drop stale entries before the chunks move
        freed = self._chunks.compact()
        if st is not None:
            # the chunks moved, their values did not: the entries stay, with the new fingerprints
            st.fresh.update(range(min(st.n, len(self._chunks))))
            st.dirty = True
            self._store_stats()
        self._publish()         # readers open the new files
        return freed

    @property
    def nchunks(self):
        return len(self._chunks)

    @property
    def chunks(self):
        """The full (compressed) chunks, as a sequence of `blzarr.chunk` objects."""
        return self._chunks

    @property
    def nleftover(self):
        return self._nleft

    leftover_elements = nleftover

    @property
    def leftover_bytes(self):
        return self._nleft * self._atom.itemsize

    @property
    def leftover_array(self):
        """The buffer of the last, uncompressed chunk (chunklen atoms; the first `nleftover` are data)."""
        return self._last

    @property
    def leftover_ptr(self):
        return self._last.ctypes.data

    @property
    def partitions(self):
        """(start, stop) of every full compressed chunk, as bcolz gives them (the leftover atoms,
        `nleftover` of them from ``nchunks * chunklen``, are not a chunk and are not listed)."""
        n = len(self._chunks)
        if self._isobj:
            return [(i, i + 1) for i in range(n)]
        cl = self._chunklen
        return [(i * cl, (i + 1) * cl) for i in range(n)]

    def __reduce__(self):
        # on disk: pickled by its directory (flushed first, reopened read-only); in memory: by its data
        if self._rootdir is not None:
            self.flush()
            kw = dict(mode="r", allow_pickle=self._isobj)
            if self._bytestore is not None and self._bytestore.remote:
                kw["storage_options"] = self._bytestore.storage_options
            return (_rebuild_carray, (None, self._rootdir, kw))
        return (_rebuild_carray, (self[:], None, dict(
            cparams=self._cparams.to_dict(), chunklen=self._chunklen, dflt=self._dflt[()],
            expectedlen=self.expectedlen, safe=self.safe)))

    def __exit__(self, *exc):
        """Leaving a ``with`` block closes the carray, as leaving ``with open(...)`` closes a file:
        on disk it is flushed, the directory's write lock is given back and later writes raise
        `blzarr.ReadOnlyError` (reads go on working); see `close`."""
        self.close()
        return False

    def to_dask(self, partition_chunks=None):
        """A dask array over this carray, one block per superchunk file (BLZ) or per group of
        `partition_chunks` chunks (bcolz layout, in memory); see `blzarr.io.dask`."""
        return integrations.get("carray_to_dask")(self, partition_chunks)

    # ---------------------------------------------------------------- derived objects
    def copy(self, **kwargs):
        """A copy, made as bcolz makes it: ``carray(data, expectedlen=len(self), **kwargs)``.

        So what `kwargs` does not give comes from the defaults, not from this carray: the cparams
        are ``blzarr.defaults.cparams`` and the chunklen is the automatic one for `expectedlen`
        (the `dflt` is kept).  `dtype` converts.
        """
        kw = dict(dtype=None, dflt=self._dflt[()], expectedlen=self._len)
        kw.update(kwargs)
        dest = kw.get("rootdir")
        if dest is not None and self._rootdir is not None and self._bytestore is None \
                and not is_url(os.fspath(dest)) and intent.same_or_nested(dest, self._rootdir):
            raise StorageError(f"copy(): the rootdir of the copy, '{os.fspath(dest)}', overlaps the "
                               f"original's, '{self._rootdir}' (it would be replaced while it is read)")
        dtype = kw.pop("dtype")
        if dtype is not None and "dflt" not in kwargs:
            kw.pop("dflt")
        if dest is not None and self._bytestore is None and not is_url(os.fspath(dest)) \
                and not kw.get("storage_options"):
            # written whole beside its rootdir, then put in place (blzarr.storage.intent)
            mode = kw.get("mode", "a")
            if os.path.exists(dest) and mode != "w":
                raise StorageError(f"copy(): '{os.fspath(dest)}' already exists and mode is {mode!r}: pass "
                                   "mode='w' to replace it")
            if mode == "r":
                raise StorageError(f"copy(): cannot create '{os.fspath(dest)}' with mode 'r' (it never "
                                   "writes): pass mode='w'")
            intent.build_then_publish(dest, lambda path: self._copy_to(dict(kw, rootdir=path, mode="w"), dtype),
                                      held=True)
            return carray(rootdir=dest, mode="a", allow_pickle=self._isobj)
        if dest is not None and kw.get("mode") == "w" and is_url(os.fspath(dest)):
            # object storage: what is there is replaced by one switch once the copy is complete
            opts = kw.get("storage_options")
            store = open_bytestore(os.fspath(dest), opts)
            return replace.build(store.root, store, lambda url: self._copy_to(dict(kw, rootdir=url), dtype),
                                 lambda: carray(rootdir=store.root, mode="a", allow_pickle=self._isobj,
                                                storage_options=opts))
        return self._copy_to(kw, dtype)

    def _copy_to(self, kw, dtype):
        if self._isobj:
            return carray(self[:], **kw)
        # (at a URL, committed once filled: an interrupt leaves nothing there, never a part)
        with creation_completed_by_caller(kw.get("rootdir")):
            new = carray(np.empty((0,) + self._atom.shape, dtype=dtype or self._atom.base), **kw)
        for _, block in _iter_blocks(self, max(self._chunklen, 1)):
            new.append(block)
        commit_creation(new)
        return new

    def view(self):
        """A light new carray object over the same compressed chunks (none is copied).

        In memory, the view and the original then change independently.  A view of an on-disk
        carray shares its files, so it is read-only (mode 'r'): writing through it would change the
        directory under the original.
        """
        new = carray.__new__(carray)
        new.__dict__.update(self.__dict__)
        new._lock = forksafe.RLock()
        new.__dict__.pop("_pinned", None)       # the calls in flight are the original's
        new._blockcache = None
        new._next_iter = None
        new._last = self._last.copy()
        if self._stats is not None:
            new._stats = self._stats.copy()
        new.__dict__.pop("_dirlock", None)      # a view of an on-disk carray is read-only
        new.__dict__.pop("_first_write", None)
        new.__dict__.pop("_recw", None)         # and never publishes a version
        if not self._ondisk:
            new._chunks = self._chunks.copy()
        else:
            if self._watch is not None:
                self._own_version(new)
            new._mode = "r"
            new._why_readonly = (
                f"this carray is a view of the on-disk carray '{self._rootdir}', and views of on-disk "
                "carrays are read-only: the view shares the directory's files with the original, so a "
                "write through it would change the data under the original object (write through the "
                "original, or make a writable copy with view.copy())")
        return new

    def _own_version(self, new):
        # The view of a reader follows the committed versions on its own: its own watch of the
        # commit record, from the version this carray loaded, and its own directory object over the
        # same files.  Shared, a reload by one would mark the version loaded for both and swap the
        # files under the other, which would then read the new files at its old length.  A change
        # since that version is found by the view's first read, which loads it first.
        w = self._watch
        new._watch = commitrec.Watch(self._rootdir, check_fp=True)
        if w.polled:
            new._watch.poll_sizes()
        new._watch.accept((w.seen, w.fp))
        new._vlock = forksafe.RLock()
        forksafe.counts_calls(new)
        new.__dict__.pop("_owner", None)        # a column's view is a carray of its own, not the table's
        new.__dict__.pop("_cut", None)
        nchunks = len(self._chunks)
        new._chunks = open_chunks(open_dir(self._rootdir, "r", None), self._rootdir, "r", self._chunk_atom,
                                  self._chunklen, nchunks, nchunks + (1 if self._nleft else 0), self._isobj)

    def reshape(self, newshape):
        """The same data with shape `newshape` (one dimension may be -1), as a new carray.

        In memory (and for mode 'r') the result is a new in-memory carray.  On disk, as in bcolz,
        the reshaped carray replaces the directory of this one, and is returned opened from it.
        """
        if isinstance(newshape, (int, np.integer)):
            newshape = (int(newshape),)
        newshape = tuple(newshape)
        size = self.size
        if newshape.count(-1) > 1:
            raise ValueError("only one dimension of newshape can be -1")
        if -1 in newshape:
            known = int(np.prod([d for d in newshape if d != -1]))
            if known == 0 or size % known:
                raise ValueError(f"cannot reshape a carray of size {size} into {newshape}")
            newshape = tuple(size // known if d == -1 else d for d in newshape)
        if int(np.prod(newshape)) != size:
            raise ValueError(f"cannot reshape a carray of size {size} into shape {newshape}")
        data = self[:].reshape(newshape)
        if self._rootdir is None or self._mode == "r":
            return carray(data, cparams=self._cparams, dflt=self._dflt[()])
        # on disk, as bcolz does: the reshaped data replaces this carray's directory, written beside it
        # first and swapped in (blzarr.storage.intent); this object is then read-only for good (its flush
        # must not write the old shape over the new directory)
        self._check_writable()      # the directory's lock
        if self._bytestore is not None:
            # object storage has no rename to swap a directory in: the reshaped copy would be
            # written in place over the objects it is made from (or, through the local swap, into
            # a local directory named after the URL)
            raise StorageError(f"reshape() cannot replace '{self._rootdir}' on object storage (it has no "
                               "atomic rename): write the reshaped data to another URL, "
                               "blzarr.carray(a[:].reshape(shape), rootdir=url2, mode='w', ...)")
        self.flush()
        target = self._rootdir
        kw = self._chunks.storage_options() if self.format == "blz" else {}
        intent.stage_then_publish(
            target,
            lambda stage: carray(data, cparams=self._cparams, dflt=self._dflt[()], rootdir=stage, mode="w",
                                 format=self.format, **kw),
            lambda e: retire(self, f"the carray '{target}' was reshaped on disk (then {type(e).__name__}): "
                                   f"reopen it with blzarr.open({target!r})"))
        retire(self, f"the carray '{target}' was reshaped on disk: use the carray reshape() returned "
                     f"(or reopen it with blzarr.open({target!r}))")
        return carray(rootdir=target, mode="a")

    def free_cachemem(self):
        """Drop cached chunk bytes and decoded blocks."""
        self._blockcache = None
        self._chunks.free_cachemem()

    @storage_op("purge")
    def purge(self):
        """Remove the on-disk data, the whole root directory, in either layout (bcolz's purge).

        In memory: nothing.  To reclaim the space rewrites left in BLZ files and keep the data,
        use `compact`.

        Raises
        ------
        blzarr.StorageError
            The directory is already gone (an ``OSError``, as bcolz raises).
        blzarr.ReadOnlyError
            The carray was opened with mode 'r'.
        """
        self._check_writable()
        if self._bytestore is not None:
            if not self._bytestore.exists(f"{META_DIR}/{STORAGE_FILE}"):
                raise StorageError(f"cannot purge '{self._rootdir}': it does not exist")
            self._bytestore.remove_all()
        elif self._rootdir:
            if not os.path.isdir(self._rootdir):
                raise StorageError(f"cannot purge '{self._rootdir}': it does not exist")
            fileio.rmtree(self._rootdir)

    # ---------------------------------------------------------------- display
    def __repr__(self):
        blocksize = self._chunks[0].blocksize if len(self._chunks) else 0
        return self._repr_text(" :=", f"  chunklen := {self._chunklen}; chunksize: "
                                      f"{self._chunklen * self._atom.itemsize}; blocksize: {blocksize}\n")

    def __str__(self):
        return array2string(self)

    @property
    def info(self):
        """A multi-line summary of the carray (an object whose repr is the text)."""
        return _Info(self)


class _Info:
    def __init__(self, obj):
        nb, cb = obj.nbytes, obj.cbytes
        rows = [("type", type(obj).__name__), ("shape", obj.shape), ("dtype", obj.dtype),
                ("nbytes", human_readable_size(nb)), ("cbytes", human_readable_size(cb)),
                ("ratio", f"{compression_ratio(nb, cb):.2f}"), ("cparams", obj.cparams),
                ("chunklen", obj.chunklen), ("nchunks", obj.nchunks), ("rootdir", obj.rootdir),
                ("mode", obj.mode)]
        self.text = "\n".join(f"{k:10}: {v}" for k, v in rows)

    def __repr__(self):
        return self.text


def _rebuild_carray(array, rootdir, kwargs):
    return carray(array, rootdir=rootdir, **kwargs)


integrations.register("new_array", carray)     # the class of the expression engine's 'carray' results


# the public read calls load the committed version first (`version`); __getitem__ and where,
# which read the caller's frame for expressions, check themselves
for _name in ("__len__", "__iter__", "iter", "wheretrue", "sum", "mean", "min", "max", "chunk_stats",
              "searchsorted", "stats_state", "read_into", "__array__", "copy", "to_dask", "__repr__", "__str__",
              "verify"):
    setattr(carray, _name, fresh_call(getattr(carray, _name)))
for _name in ("shape", "len", "size", "nbytes", "cbytes", "nchunks", "nleftover"):
    setattr(carray, _name, property(fresh_call(getattr(carray, _name).fget)))
del _name
