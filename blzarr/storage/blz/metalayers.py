"""BLZ metalayers: fixed-length ones (`FixedMeta`, in the metadata section of every superchunk file) and
variable-length ones (`VLMeta`, meta/vlmeta); `BlzMetalayers` is the part of `BlzDir` that reads and
writes them."""

import base64
import json

import numpy as np

from blzarr import _chunk
from blzarr import _superchunk as sc
from blzarr.storage.blz.format import _encode
from blzarr.errors import BlzarrError, FormatError, MissingError
from blzarr.storage.files import META_DIR

VLMETA_FILE = "vlmeta"
VLMETA_MAGIC = b"BLZV"


class MetalayerError(BlzarrError, ValueError):
    """A fixed-length metalayer rule was broken (added after the first chunk, resized...)."""


class BlzMetalayers:
    """Fixed-length and variable-length metalayers of a `BlzDir`."""

    # ------------------------------------------------------------------ metalayers
    @property
    def meta(self):
        return FixedMeta(self)

    @property
    def vlmeta(self):
        return VLMeta(self)

    def _meta_set(self, name, value, adding):
        self._check_writable()
        if not isinstance(name, str):
            raise TypeError(f"metalayer names must be strings, got {name!r}")
        enc = _encode(value)
        with self._lock:
            layers = self._fixed["meta"]
            if adding:
                if self._nphys:
                    raise MetalayerError(
                        f"cannot add fixed-length metalayer {name!r} to '{self.rootdir}': "
                        f"{self._nphys} chunk(s) are already written, and fixed-length metalayers can only "
                        "be added before the first chunk (use vlmeta, whose entries can be added any time)")
            else:
                old = _encode(layers[name])
                if len(old) != len(enc):
                    raise MetalayerError(
                        f"cannot update fixed-length metalayer {name!r}: its value encodes to {len(old)} "
                        f"bytes and the new one to {len(enc)}; a fixed-length metalayer keeps its size "
                        "(use vlmeta for values that change size)")
            new_fixed = dict(self._fixed, meta=dict(layers, **{name: value}))
            self._rewrite_meta(new_fixed, same_size=not adding)

    def _meta_del(self, name):
        self._check_writable()
        with self._lock:
            if name not in self._fixed["meta"]:
                raise KeyError(name)
            if self._nphys:
                raise MetalayerError(
                    f"cannot delete fixed-length metalayer {name!r} of '{self.rootdir}': chunks are already "
                    "written and the metadata section of every superchunk would change size")
            layers = dict(self._fixed["meta"])
            del layers[name]
            self._rewrite_meta(dict(self._fixed, meta=layers), same_size=False)

    def _rewrite_meta(self, new_fixed, same_size):
        with self._lock:
            for fno in range(1, self.nfiles + 1):
                self._take(fno)
        self._rewrite_meta_sections(new_fixed, same_size)
        self.flush_files()

    def _rewrite_meta_sections(self, new_fixed, same_size):
        old_fixed = self._fixed
        self._fixed = new_fixed
        try:
            if not same_size:
                # only allowed with no chunk written: recreate the (single, empty) file
                for fno in range(self.nfiles, 1, -1):
                    self._close(fno)
                    self._forget_file(fno)
                    self._remove_file(fno)
                self.nfiles = 1
                self._new_file(1)
                return
            # file 1 last: it holds the committed value (a writer reopening after a crash copies it
            # to the others, see _repair)
            for fno in list(range(2, self.nfiles + 1)) + [1]:
                f = self._file(fno)
                fd = self._fd(fno)
                raw = self._meta_bytes(fno)
                if len(raw) != f.meta_size:
                    raise MetalayerError(f"superchunk file '{f.path}': its metadata section holds "
                                         f"{f.meta_size} bytes, the update needs {len(raw)}")
                self._fio.pwrite(fd, raw, 32, f.path)
                self._barrier(fd)
                f.meta_json = json.loads(raw.decode("ascii"))
                self._after_write(f, fd)
        except BaseException:
            self._fixed = old_fixed
            raise

    def _read_vlmeta(self):
        path = self.meta_path(VLMETA_FILE)
        raw = self._meta_bytes_or_none(VLMETA_FILE)
        if raw is None:
            return {}
        if len(raw) < 8 + 16 or raw[:4] != VLMETA_MAGIC or raw[4] != 1:
            raise FormatError(f"'{path}' is not a BLZ vlmeta file (magic 'BLZV', version 1)")
        cid = raw[5]
        if cid not in sc.CHECKSUMS:
            raise FormatError(f"'{path}': unknown checksum id {cid}")
        cks = sc.checksum_size(cid)
        body = memoryview(raw)[8:]
        if len(body) < 16 + cks:
            raise FormatError(f"'{path}' is truncated")
        ct = int.from_bytes(body[12:16], "little")
        if ct + cks != len(body):
            raise FormatError(f"'{path}': the chunk claims {ct} bytes, the file holds {len(body) - cks}")
        sc.verify_checksum(cid, body[:ct], body[ct:], f"'{path}'")
        data = bytes(body[:ct])
        nb = _chunk.validate(data, -1, path)
        out = np.empty(nb, dtype=np.uint8)
        _chunk.decompress_into(data, out, 1, False, path)
        try:
            doc = json.loads(out.tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise FormatError(f"'{path}' does not hold JSON: {e}") from None
        if not isinstance(doc, dict):
            raise FormatError(f"'{path}' does not hold a JSON object")
        res = {}
        for k, v in doc.items():
            if isinstance(v, dict) and "json" in v:
                res[k] = v["json"]
            elif isinstance(v, dict) and "bytes" in v:
                res[k] = base64.b64decode(v["bytes"])
            else:
                raise FormatError(f"'{path}': bad entry {k!r}")
        return res

    def _write_vlmeta(self, values):
        self._check_writable()
        doc = {}
        for k, v in values.items():
            if isinstance(v, (bytes, bytearray, memoryview)):
                doc[k] = {"bytes": base64.b64encode(bytes(v)).decode("ascii")}
            else:
                _encode(v)
                doc[k] = {"json": v}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
        arr = np.frombuffer(text, dtype=np.uint8)
        data = _chunk.compress(arr, 1, 5, 0, "zstd" if "zstd" in _chunk.compressor_list() else "blosclz",
                               0, 1) if len(arr) else b""
        if not len(arr):
            data = _chunk.compress(np.zeros(0, dtype=np.uint8), 1, 0, 0, "blosclz", 0, 1)
        cid = self.checksum_id
        self._put_meta_bytes(VLMETA_FILE, VLMETA_MAGIC + bytes([1, cid, 0, 0]) + data + sc.checksum(cid, data))

    def _meta_bytes_or_none(self, name):
        """The bytes of meta/`name`, None when it does not exist."""
        try:
            return self.bytestore.get(f"{META_DIR}/{name}")
        except MissingError:
            return None

    def _put_meta_bytes(self, name, data):
        self.bytestore.put_atomic(f"{META_DIR}/{name}", data, parents=False)


class FixedMeta:
    """Fixed-length metalayers (`carray.meta`): stored in the metadata section of every superchunk file.

    Added only before the first chunk is written; updated in place only with a value of the same
    encoded (canonical JSON) size.
    """

    def __init__(self, store):
        self._layoutdir = store

    def __getitem__(self, name):
        return self._layoutdir._fixed["meta"][name]

    def __setitem__(self, name, value):
        self._layoutdir._meta_set(name, value, adding=name not in self._layoutdir._fixed["meta"])

    def __delitem__(self, name):
        self._layoutdir._meta_del(name)

    def __contains__(self, name):
        return name in self._layoutdir._fixed["meta"]

    def __iter__(self):
        return iter(list(self._layoutdir._fixed["meta"]))

    def __len__(self):
        return len(self._layoutdir._fixed["meta"])

    def keys(self):
        return list(self._layoutdir._fixed["meta"])

    def items(self):
        return list(self._layoutdir._fixed["meta"].items())

    def get(self, name, default=None):
        return self._layoutdir._fixed["meta"].get(name, default)

    def getall(self):
        return json.loads(_encode(self._layoutdir._fixed["meta"]))

    def __repr__(self):
        return f"meta({self.getall()!r})"


class VLMeta:
    """Variable-length metalayers (`carray.vlmeta`): any JSON value or bytes, any size, stored compressed
    in meta/vlmeta, which is rewritten (atomically) on every update."""

    def __init__(self, store):
        self._layoutdir = store

    def getall(self):
        return self._layoutdir._read_vlmeta()

    def __getitem__(self, name):
        return self.getall()[name]

    def __setitem__(self, name, value):
        if not isinstance(name, str):
            raise TypeError(f"vlmeta names must be strings, got {name!r}")
        d = self.getall()
        d[name] = value
        self._layoutdir._write_vlmeta(d)

    def __delitem__(self, name):
        d = self.getall()
        del d[name]
        self._layoutdir._write_vlmeta(d)

    def __contains__(self, name):
        return name in self.getall()

    def __iter__(self):
        return iter(list(self.getall()))

    def __len__(self):
        return len(self.getall())

    def keys(self):
        return list(self.getall())

    def items(self):
        return list(self.getall().items())

    def get(self, name, default=None):
        return self.getall().get(name, default)

    def __repr__(self):
        return f"vlmeta({self.getall()!r})"
