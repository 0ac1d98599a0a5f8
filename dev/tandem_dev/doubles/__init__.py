"""Workers without a model, for the benchmarks and the tests: never on a serving path.

- ``inprocess``   in-process workers behind the router's ``WorkerClient`` Protocol, with a
  shared KV ledger and per-call fault injection (router, frontend and fuzz tests; the
  frontend benchmark's "null engine")
- ``null_worker`` the same behind the real gRPC API, as a process
  (``python -m tandem_dev.doubles.null_worker``; ``tandem up --worker-module`` swaps it in
  for load, fault and fuzz runs)
"""
