"""``tandem plan -f FILE``: does each pool's worker fit its GPUs? Prints the numbers.
With a workload (``--isl --osl --rate --ttft-p90 --itl-p90-ms``) it recommends the
deployment instead (``plan_workload``).

Exit codes: 0 every pool fits, 1 some pool does not fit, 2 invalid input (as
``tandem validate``).
"""

from __future__ import annotations

import argparse
import sys

from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import ManifestError, load_file
from tandem.capacity.gpus import gpu_for
from tandem.capacity.models import GIB
from tandem.capacity.plan import ClusterPlan, PoolPlan, plan_cluster
from tandem.cli import plan_workload
from tandem.cli.manifest_files import add_files_option, print_manifest_errors
from tandem.engines.trtllm.config import TrtllmConfigError

EXIT_UNFIT = 1
EXIT_INVALID = 2


def cmd_plan(args: argparse.Namespace) -> int:
    clusters: list[tuple[str, InferenceCluster]] = []
    for name in args.files:
        try:
            objects = load_file(name)
        except ManifestError as exc:
            print_manifest_errors(exc)
            return EXIT_INVALID
        clusters += [(name, o) for o in objects if isinstance(o, InferenceCluster)]
    if not clusters:
        print("error: no InferenceCluster in the given files", file=sys.stderr)
        return EXIT_INVALID
    if args.output == "json" and not plan_workload.wants_recommendation(args):
        print("error: --output json describes a recommendation: give a workload too "
              "(--isl, --osl, --rate, --ttft-p90, --itl-p90-ms)", file=sys.stderr)  # fmt: skip
        return EXIT_INVALID
    if plan_workload.wants_recommendation(args):
        if len(clusters) != 1:
            print("error: a workload plan takes exactly one InferenceCluster", file=sys.stderr)
            return EXIT_INVALID
        return plan_workload.cmd_recommend(args, *clusters[0])
    unfit = False
    for source, cluster in clusters:
        try:
            plan = plan_cluster(cluster)
        except TrtllmConfigError as exc:
            print(f"error: {source}: spec.engine: {exc}", file=sys.stderr)
            return EXIT_INVALID
        print(format_plan(cluster, plan))
        unfit = unfit or not plan.fits
    return EXIT_UNFIT if unfit else 0


def format_plan(cluster: InferenceCluster, plan: ClusterPlan) -> str:
    meta = cluster.metadata
    name = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    header = f"{name}: {plan.model} on {plan.profile.value}"
    if plan.skipped is not None:
        return f"{header} — not planned: {plan.skipped}"
    gpu = gpu_for(plan.profile)
    lines = [f"{header} ({gpu.product}, {gpu.memory_bytes / 1e9:.0f} GB per GPU)"]
    lines += [_pool_line(p) for p in plan.pools]
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    lines.append(f"  {verdict}; at most {plan.max_gpus} GPUs at maxReplicas")
    return "\n".join(lines)


def _pool_line(pool: PoolPlan) -> str:
    report = pool.report
    status = "ok  " if pool.fits else "FAIL"
    return (
        f"  [{status}] {pool.role.value:<7} TP{report.tensor_parallel_size}, "
        f"{pool.gpus_per_worker} GPU(s)/worker, batch {pool.max_batch} "
        f"(from {pool.max_batch_source}); weights {report.weight_bytes_per_gpu / GIB:.1f} GiB, "
        f"KV {report.kv_demand_bytes / GIB:.1f} of {report.kv_pool_bytes / GIB:.1f} GiB per GPU\n"
        f"         {report.message}"
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="check that each pool's workers fit their GPUs, or recommend a deployment "
        "for a workload",
    )
    add_files_option(p, help="InferenceCluster manifests")
    plan_workload.add_workload_options(p)
    p.set_defaults(handler=cmd_plan)
