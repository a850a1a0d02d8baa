"""bcolz's module path `bcolz.ctable`: this name is the module `blzarr.containers.ctable.table`
itself, so code written for bcolz that imports it, reads or sets its attributes, reaches the real
module."""

import sys

from blzarr import utils
from blzarr.containers.ctable import table as _module

# bcolz.ctable's module-level `utils`, which the table itself does not need
_module.utils = utils
sys.modules[__name__] = _module
