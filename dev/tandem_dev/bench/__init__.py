"""Benchmarks behind `make bench` (ratios measured side by side in one run)."""
