"""Tandem's development code: it imports the product, the product never imports it.

- ``bench/``          ``make bench``: every benchmark section (``python -m tandem_dev.bench``)
- ``autoscale_sim/``  the autoscaling benchmarks' traces, figures and SLO oracle
- ``faults/``         the fault suite (data plane and control plane), soak and HTTP fuzz
- ``doubles/``        model-less workers for tests and benchmarks (in-process and gRPC)
- ``harness``         the operator as an out-of-cluster process against a test cluster
- ``docgen/``         generators of doc tables the tests keep equal to the code
"""
