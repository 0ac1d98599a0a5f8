"""Unit tests (a package, so test modules are named unit.<area>.<module> and never shadow the standard library, e.g. ``operator``)."""
