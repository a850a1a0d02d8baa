"""bcolz's module path `bcolz.arrayprint`: this name is the module `blzarr.containers.arrayprint` itself, so code written
for bcolz that imports it, reads or sets its attributes, reaches the real module."""

import sys

from blzarr.containers import arrayprint as _module

sys.modules[__name__] = _module
