"""Metrics: the per-run SQLite store (schema in docs/metrics.md)."""
