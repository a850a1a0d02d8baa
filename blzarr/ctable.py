"""`ctable`: a columnar table of carrays (built by the ctable issue)."""


class ctable:
    """A table stored column by column, one carray per column."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("ctable is not implemented yet")
