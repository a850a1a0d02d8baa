"""bcolz's ``bcolz.defaults`` module: the process-wide defaults (defined in `blzarr.runtime.params`).

As in bcolz, ``blzarr.defaults`` is the `Defaults` instance once blzarr is imported, and this
module is reached with ``import blzarr.defaults`` / ``from blzarr.defaults import defaults_ctx``.
"""

from blzarr.runtime.params import Defaults, defaults, defaults_ctx

__all__ = ["Defaults", "defaults", "defaults_ctx"]
