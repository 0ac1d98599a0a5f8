"""Mirrors tensorrt_llm/version.py (v1.2.1)."""

__version__ = "1.2.1"
