"""bcolz's module path `bcolz.chunked_eval`: this name is the module `blzarr.query.chunked_eval` itself, so code written
for bcolz that imports it, reads or sets its attributes, reaches the real module."""

import sys

from blzarr.query import chunked_eval as _module

sys.modules[__name__] = _module
