"""Tools around the operator, never imported by it: the out-of-cluster process harness,
the apply-to-Ready benchmark, the control-plane fault scenarios, and the CRD reference
generator (``python -m tandem_operator.tools.crd_reference``)."""
