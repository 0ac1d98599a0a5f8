"""Per-request OpenTelemetry traces: turning export on, and the tracer every span uses.

Configuration travels as the standard OpenTelemetry environment variables
(``tracing_env``), set by the operator on the frontend's and workers' pods and by
``tandem up --otlp-endpoint`` on its processes, so one mechanism serves both and any
OpenTelemetry-aware wrapper can override it. Without an endpoint nothing is installed:
the API's default tracer provider hands out non-recording spans, and the SDK and its
exporter are never imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace

ENDPOINT_VAR = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
# The ratio of OpenTelemetry's parentbased_traceidratio sampler, the one installed.
SAMPLER_ARG_VAR = "OTEL_TRACES_SAMPLER_ARG"
TRACER_NAME = "tandem"
# A proxy until configure_tracing installs a provider, then that provider's tracer; with
# none installed its spans are non-recording no-ops.
TRACER = trace.get_tracer(TRACER_NAME)


def tracing_env(otlp_endpoint: str | None, sampling_ratio: float) -> dict[str, str]:
    """The environment that turns export on (empty: tracing off)."""
    if not otlp_endpoint:
        return {}
    return {
        ENDPOINT_VAR: otlp_endpoint,
        SAMPLER_ARG_VAR: repr(float(sampling_ratio)),
    }


def configure_tracing(service_name: str, env: Mapping[str, str] = os.environ) -> bool:
    """Install an exporting tracer provider when ``env`` names an OTLP endpoint; True if
    it did. Call once per process, before the first span. The provider flushes what it
    still holds when the process exits (the SDK's atexit hook)."""
    endpoint = env.get(ENDPOINT_VAR, "")
    if not endpoint:
        return False
    # Imported here: a process without tracing never loads the SDK or gRPC exporter.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

    ratio = float(env.get(SAMPLER_ARG_VAR, "1.0"))
    # The frontend's root span samples; everyone downstream follows the sampled flag it
    # propagates, so a trace is never missing its middle.
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: service_name}),
        sampler=ParentBasedTraceIdRatio(ratio),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return True
