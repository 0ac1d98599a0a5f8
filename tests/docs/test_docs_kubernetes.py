"""The Kubernetes paths of README.md and docs/, run as written against the test control
plane: the simulated cluster (kwok GPU nodes, the operator out of the cluster) in a
reader's shell with its own network namespace, and the whole journey on the real node
(kubelet + containerd on this machine: one at a time, `flock /tmp/tandem-realnode.lock`).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.k8s


def test_readme_simulated_cluster(docs: Any, doc_shell: Any) -> None:
    run = doc_shell.run(docs.sequence("README.md", "simulated"), timeout_s=540)
    assert run.mismatches == [], "\n".join(run.mismatches)
    assert "inferencecluster.tandem.dev/gpt-oss-120b condition met" in run.output


def test_gpu_deployment(docs: Any, doc_shell: Any) -> None:
    """docs/gpu-deployment.md §4 on README's simulated cluster (its first two blocks start
    the cluster and the operator, its last stops the cluster)."""
    readme = docs.sequence("README.md", "simulated")
    deploy = docs.sequence("docs/gpu-deployment.md", "deploy")
    run = doc_shell.run([*readme[:2], *deploy, readme[-1]], timeout_s=540)
    assert run.mismatches == [], "\n".join(run.mismatches)


def test_operator_recipe(docs: Any, doc_shell: Any) -> None:
    """docs/operator.md's out-of-cluster recipe, with docs/security.md's credential
    rotation on its cluster before the teardown."""
    recipe = docs.sequence("docs/operator.md", "out-of-cluster")
    rotate = docs.sequence("docs/security.md", "rotate")
    run = doc_shell.run([*recipe[:-1], *rotate, recipe[-1]], timeout_s=540)
    assert run.mismatches == [], "\n".join(run.mismatches)
    assert "inferencecluster.tandem.dev/reference condition met" in run.output
    assert "secret/reference-credentials condition met" in run.output


@pytest.mark.timeout(1200)
def test_journey_on_the_real_node(docs: Any, host_doc_shell: Any) -> None:
    """docs/images.md's build, README's journey up to its first request, docs/port-forward.md
    on that cluster, then README's teardown."""
    images = docs.sequence("docs/images.md", "real-node")
    readme = docs.sequence("README.md", "real-node")
    guide = docs.sequence("docs/port-forward.md", "journey")
    run = host_doc_shell.run([*images, *readme[:-1], *guide, readme[-1]], timeout_s=1100)
    assert run.mismatches == [], "\n".join(run.mismatches)
    remote = 'tandem_router_prefill_decisions_total{path="remote",reason="long_prompt"} '
    values = [line for line in run.output.splitlines() if line.startswith(remote)]
    assert values and float(values[-1].rsplit(" ", 1)[1]) >= 1, run.output[-3000:]
    assert "404 model_not_found" in run.output
