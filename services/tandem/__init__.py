"""Tandem: disaggregated prefill/decode LLM serving."""

import os

# grpcio's wheels install fork handlers by default, and a fork taken while another thread
# is inside gRPC's core skips or breaks them: the forked child restarts pollers on
# descriptors it is about to close, and gRPC may abort (the likely end of a CI run lost
# to SIGABRT). Our processes fork only to exec (the supervisor starting workers, the
# test harness starting clusters), the case gRPC documents this switch for.
# gRPC reads it when it is first imported, and every module of ours that uses gRPC is
# imported after this package.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
