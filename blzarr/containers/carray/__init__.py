"""carray, the compressed enlargeable array: `array` (the class: create/open, properties, copy,
view, reshape, display), `read`, `write`, `reduce` and `stats` (its per-chunk statistics)."""
