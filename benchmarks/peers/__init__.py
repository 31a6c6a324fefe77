"""The `make bench` peer comparison: one impl_* adapter per framework, each
timed in its own venv."""
