"""RemoteBlzDir's writing (see remote_blz): a superchunk file that is to change is copied whole into a
local spool directory, changed there by the `BlzDir` code, and uploaded whole when it is complete or
flushed; meta/sizes is written after the files it counts."""

import os


class RemoteBlzWrites:
    """The write side of `remote_blz.RemoteBlzDir` (a part of that class, as the blz_* modules are
    parts of `BlzDir`): the spool, uploads, and the `BlzDir` write paths wrapped to spool first."""

    # ------------------------------------------------------------------ writing: a local spool
    def _spool(self, fno):
        """A local copy of file `fno` to change (downloaded whole the first time)."""
        if fno in self._spooled or fno > self.nfiles:
            return
        data = self.bytes.get(self._key(fno))
        path = self._file_path(fno)
        with open(path, "wb") as fh:
            fh.write(data)
        self._forget_file(fno)
        self._spooled.add(fno)

    def _new_file(self, fno):
        self._file_path(fno)
        self._spooled.add(fno)
        super()._new_file(fno)
        self._dirty.add(fno)
        # the files before it are complete: upload them now (meta/sizes still counts what it did)
        self.flush_files(below=fno)

    def _after_write(self, f, fd):
        super()._after_write(f, fd)
        self._dirty.add(f.fno)

    def _remove_file(self, fno):
        self._close(fno)
        if fno in self._spooled:
            try:
                os.remove(self._file_path(fno))
            except FileNotFoundError:
                pass
            self._spooled.discard(fno)
        self._dirty.discard(fno)
        self._sizes.pop(fno, None)
        self._etags.pop(fno, None)
        self.bytes.delete(self._key(fno))

    def _write_chunk(self, n, data):
        self._check_writable()
        with self._lock:
            self._spool(n // self.K + 1)
        return super()._write_chunk(n, data)

    def _remove_chunks_from(self, n):
        with self._lock:
            if n >= self._nphys:
                return
            self._spool(max(1, -(-max(n, 0) // self.K)))
        return super()._remove_chunks_from(n)

    def _rewrite_meta(self, new_fixed, same_size):
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                self._spool(fno)
        super()._rewrite_meta(new_fixed, same_size)
        self.flush_files()

    def compact(self):
        self._check_writable()
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                self._spool(fno)
            freed = super().compact()
            self._dirty.update(range(1, self.nfiles + 1))
        self.flush_files()
        return freed

    def _file_exists(self, fno):
        return (fno in self._spooled and os.path.exists(self._file_path(fno))) or fno in self._sizes

    def flush_files(self, below=None, check=True):
        """Upload the changed files (those numbered below `below` only, when given); complete files
        leave the spool afterwards (later reads of them are ranged GETs)."""
        with self._lock:
            if check and any(below is None or fno < below for fno in self._dirty):
                self._check_sole_writer()       # before any upload: never interleave with another writer
            for fno in sorted(self._dirty):
                if below is not None and fno >= below:
                    continue
                with open(self._file_path(fno), "rb") as fh:
                    data = fh.read()
                # conditional where the store can: refused when another writer replaced (or created)
                # the file since this writer saw it
                seen = self._etags.get(fno, False if fno in self._sizes else None)
                tag = self.bytes.put(self._key(fno), data, **self._conditions(seen))
                self._etags[fno] = tag if tag is not None else False
                self._sizes[fno] = len(data)
                self._dirty.discard(fno)
            for fno in sorted(self._spooled):
                if fno < self.nfiles and fno not in self._dirty:
                    self._close(fno)
                    self._forget_file(fno)
                    self._spooled.discard(fno)
                    try:
                        os.remove(self._file_path(fno))
                    except FileNotFoundError:
                        pass
