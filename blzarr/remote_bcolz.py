"""The bcolz 1.x layout on a byte store (object storage): one object per chunk.

``data/__N.blp`` objects are read whole (one GET) and written whole (one PUT, which object stores
make atomic); the meta JSON files are objects too.  The directory listing (one LIST) at open
gives the chunks' sizes.  Writers upload each chunk object as it is appended, meta/sizes at flush:
a reader never counts a chunk object that is not there.
"""

import json

from blzarr.bcolz_layout import BLP_HEADER, BLP_HEADER_SIZE, BLP_MAGIC, CHUNK_EXT, BcolzDir
from blzarr.bytestore import join
from blzarr.errors import ConcurrentWriterError, FormatError, MissingError, StorageError
from blzarr.files import ATTRS_FILE, DATA_DIR, META_DIR, SIZES_FILE, ObjectPath, parse_json


class RemoteBcolzDir(BcolzDir):
    """The objects of one carray in the bcolz layout on a byte store."""

    remote = True

    def __init__(self, rootdir, bytestore):
        super().__init__(bytestore.root)
        self.bytes = bytestore
        self.datadir = join(self.rootdir, DATA_DIR)
        self.metadir = join(self.rootdir, META_DIR)
        self._listing = None
        self._sizes_etag = False        # meta/sizes as this writer last saw it (False: not looked)
        self._checked = False           # no other writer seen since the last flush
        self._etags = {}                # chunk object name -> its ETag as this writer last saw it
        self._created = False           # made by this writer: no object existed before

    @classmethod
    def create(cls, rootdir, bytestore):
        self = cls(rootdir, bytestore)
        self._sizes_etag = None
        self._created = True
        return self

    def _conditions(self, seen):
        """The conditions of a put over an object last seen with ETag `seen` (None: absent, False:
        cannot tell): none for a writer that does not track what it saw (a dask partition writer)."""
        if self._sizes_etag is False or seen is False or not self.bytes.conditional:
            return {}
        if isinstance(seen, str) and not seen.startswith("size:"):
            return {"if_match": seen}
        return {"if_none_match": seen is None}

    def _seen(self, name):
        if name in self._etags:
            return self._etags[name]
        if self._listing is None and not self._created and self._sizes_etag is not False:
            self._list()
        if name in self._etags:
            return self._etags[name]
        return False if self._listing is not None and name in self._listing else None

    def _after_open_for_write(self):
        if self._sizes_etag is False:
            self._sizes_etag = self.bytes.etag(f"{META_DIR}/{SIZES_FILE}")

    def _check_sole_writer(self):
        """Before the first upload after a flush: meta/sizes must be as this writer left it."""
        if self._checked or self._sizes_etag is False:
            return
        if self.bytes.etag(f"{META_DIR}/{SIZES_FILE}") != self._sizes_etag:
            raise ConcurrentWriterError(
                f"'{self.meta_path(SIZES_FILE)}' was changed by another writer since this one last wrote or "
                "read it: object storage has no lock, write a dataset from one writer at a time")
        self._checked = True

    def check_layout(self):
        pass

    def _key(self, n):
        return f"{DATA_DIR}/__{n}{CHUNK_EXT}"

    def chunk_path(self, n):
        return join(self.datadir, f"__{n}{CHUNK_EXT}")

    def _list(self):
        if self._listing is None:
            etags = {}
            self._listing = self.bytes.list(DATA_DIR, etags=etags)
            for name, tag in etags.items():
                self._etags.setdefault(name, tag)
        return self._listing

    def chunk_file_size(self, n):
        return self._list().get(f"__{n}{CHUNK_EXT}")

    def read_chunk(self, n):
        path = self.chunk_path(n)
        try:
            raw = self.bytes.get(self._key(n))
        except MissingError:
            raise MissingError(f"chunk file '{path}' is missing") from None
        if len(raw) < BLP_HEADER_SIZE + 16:
            raise FormatError(f"chunk file '{path}' is truncated ({len(raw)} bytes)")
        if raw[:4] != BLP_MAGIC:
            raise FormatError(f"chunk file '{path}' does not start with 'blpk'")
        ctbytes = int.from_bytes(raw[BLP_HEADER_SIZE + 12:BLP_HEADER_SIZE + 16], "little", signed=True)
        avail = len(raw) - BLP_HEADER_SIZE
        want = ctbytes if 16 <= ctbytes <= avail else avail
        return raw[BLP_HEADER_SIZE:BLP_HEADER_SIZE + want]

    def check_chunk_files(self, n):
        if n <= 0:
            return
        names = self._list()
        if not names and getattr(self.bytes, "http", False):
            return      # a server that lists no directory: a missing chunk is reported when read
        for k in range(min(n, len(names) + 1)):
            if f"__{k}{CHUNK_EXT}" not in names:
                raise StorageError(
                    f"chunk file '{self.chunk_path(k)}' is missing (meta/sizes file "
                    f"'{self.meta_path(SIZES_FILE)}' implies {n} full chunk files)")

    def write_chunk(self, n, data):
        self._check_sole_writer()
        payload = BLP_HEADER + bytes(data)
        name = f"__{n}{CHUNK_EXT}"
        # conditional where the store can: refused when another writer replaced or created it
        tag = self.bytes.put(self._key(n), payload, **self._conditions(self._seen(name)))
        self._etags[name] = tag if tag is not None else False
        if self._listing is not None:
            self._listing[f"__{n}{CHUNK_EXT}"] = len(payload)

    def read_chunk_file(self, n):
        try:
            return self.bytes.get(self._key(n))
        except StorageError:
            return None

    def restore_chunk_file(self, n, raw):
        self.write_chunk(n, raw[BLP_HEADER_SIZE:])

    def stray_files(self, expected):
        self._listing = None
        return sorted(f for f in self._list() if f.endswith(CHUNK_EXT) and f.startswith("__")
                      and f[2:-len(CHUNK_EXT)].isdigit() and int(f[2:-len(CHUNK_EXT)]) >= expected)

    def remove_chunks_from(self, n):
        names = self.stray_files(n)
        if names:
            self._check_sole_writer()
        for name in names:
            self.bytes.delete(f"{DATA_DIR}/{name}")
            self._listing.pop(name, None)
            self._etags.pop(name, None)

    def meta_path(self, name):
        return join(self.metadir, name)

    def read_meta(self, name):
        path = self.meta_path(name)
        try:
            raw = self.bytes.get(f"{META_DIR}/{name}")
        except MissingError:
            raise MissingError(f"meta/{name} file '{path}' does not exist") from None
        obj = parse_json(raw, path, f"meta/{name}")
        if not isinstance(obj, dict):
            raise FormatError(f"meta/{name} file '{path}' must hold a JSON object, not {type(obj).__name__}")
        return obj

    def write_meta(self, name, obj):
        key = f"{META_DIR}/{name}"
        raw = json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n"
        if name != SIZES_FILE:
            self.bytes.put_atomic(key, raw)
            return
        self._checked = False           # checked again at every flush, whatever the chunks saw
        self._check_sole_writer()
        # the commit point: conditional where the store can, so two writers never both commit
        tag = self.bytes.put(key, raw, **self._conditions(self._sizes_etag))
        self._sizes_etag = tag if tag is not None else self.bytes.etag(key)
        self._checked = False

    @property
    def attrs_path(self):
        return ObjectPath(self.bytes, ATTRS_FILE)
