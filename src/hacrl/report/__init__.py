"""Metrics sinks, plots and comparison reports."""
