"""bcolz's module path `bcolz.attrs`: this name is the module `blzarr.storage.attrs` itself, so code written
for bcolz that imports it, reads or sets its attributes, reaches the real module."""

import sys

from blzarr.storage import attrs as _module

sys.modules[__name__] = _module
