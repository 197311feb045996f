"""Benchmark runs and experiments live here (the research-instrument issue)."""
