"""Unit tests.

A package, so that test modules are named ``unit.<area>.<module>`` and a directory such
as ``tests/unit/operator`` never shadows a standard-library module.
"""
