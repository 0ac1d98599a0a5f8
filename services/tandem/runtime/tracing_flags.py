"""``--otlp-endpoint`` and ``--trace-sampling-ratio``: per-request traces for a local
cluster, the command-line form of ``spec.observability.tracing`` (the flags win)."""

from __future__ import annotations

import argparse

from tandem.api.v1alpha1 import InferenceCluster, TracingSpec


def add_tracing_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="export per-request traces over OTLP/gRPC to URL, e.g. http://127.0.0.1:4317 "
        "(default: spec.observability.tracing.otlpEndpoint; unset: no traces)",
    )
    parser.add_argument(
        "--trace-sampling-ratio",
        type=float,
        metavar="R",
        help="fraction of requests traced, 0 to 1 (default: the spec's, else 1)",
    )


def apply_tracing_flags(cluster: InferenceCluster, args: argparse.Namespace) -> InferenceCluster:
    """``cluster`` with the flags' tracing settings; ValueError names a bad value."""
    tracing = cluster.spec.observability.tracing
    overrides = {
        key: value
        for key, value in (
            ("otlpEndpoint", args.otlp_endpoint),
            ("samplingRatio", args.trace_sampling_ratio),
        )
        if value is not None
    }
    if not overrides:
        return cluster
    # Validated as the spec field is, so a bad flag fails like a bad file.
    merged = TracingSpec.model_validate(tracing.model_dump(by_alias=True) | overrides)
    observability = cluster.spec.observability.model_copy(update={"tracing": merged})
    spec = cluster.spec.model_copy(update={"observability": observability})
    return cluster.model_copy(update={"spec": spec})


def tracing_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """The flags again, for a process started with the same command line."""
    argv: tuple[str, ...] = ()
    if args.otlp_endpoint is not None:
        argv += ("--otlp-endpoint", args.otlp_endpoint)
    if args.trace_sampling_ratio is not None:
        argv += ("--trace-sampling-ratio", repr(args.trace_sampling_ratio))
    return argv
