"""Experiments behind docs/performance.md: may use private names; not smoke-tested."""
