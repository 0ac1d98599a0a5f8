"""Prefill/decode worker processes: gRPC (``worker.proto``) over one engine.

Run one with ``python -m tandem.worker --role prefill|decode|both ...``; talk to one with
``tandem.worker.client.WorkerClient``.
"""
