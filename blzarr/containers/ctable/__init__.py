"""ctable, a table of carray columns: `table` (the class: create/open, columns, __getitem__, copy,
fetchwhere, display), `read`, `write` and `query` (where, whereblocks, eval)."""
