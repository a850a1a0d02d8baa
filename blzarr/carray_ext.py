"""bcolz's ``bcolz.carray_ext``: where bcolz applications import `carray` and `chunk` from.

bcolz compiled its containers in this one extension module; blzarr defines them in
`blzarr.carray` and `blzarr.chunk` and gathers them here under bcolz's path, with the constants
of the bcolz 1.x layout that applications read.
"""

import numpy as np

from blzarr.containers.arrayprint import array2string  # noqa: F401
from blzarr.storage.attrs import attrs  # noqa: F401
from blzarr.containers.carray.array import carray  # noqa: F401
from blzarr.storage.chunk import chunk  # noqa: F401
from blzarr.storage.files import DATA_DIR, META_DIR, SIZES_FILE, STORAGE_FILE  # noqa: F401
from blzarr.toplevel import blosc_compressor_list, blosc_version  # noqa: F401
from blzarr import utils  # noqa: F401
from blzarr.utils import build_carray  # noqa: F401

# the bcolz 1.x layout: one Bloscpack file per chunk, data/__<n>.blp
EXTENSION = ".blp"
MAGIC = b"blpk"
BLOSC_HEADER_LENGTH = 16
BLOSCPACK_HEADER_LENGTH = 16
FORMAT_VERSION = 1
MAX_FORMAT_VERSION = 255
MAX_CHUNKS = 2 ** 63 - 1
IntType = np.dtype(np.int64)
SizeType = np.int64
