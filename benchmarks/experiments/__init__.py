"""Experiments behind docs/records/performance.md: may use private names; not smoke-tested."""
