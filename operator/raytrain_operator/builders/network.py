"""The job's network fence: a NetworkPolicy that admits to its pods only its own pods and KubeRay.

A Ray cluster listens on many ports (the dashboard and job API on 8265, the GCS on 6379, the
client server on 10001, and per-node ports for the raylet, the object manager and every worker
process), on all interfaces. Ray's token authentication guards the dashboard, the job API and
the GCS, but not every port, and a pod that can reach a raylet or a worker process of another
tenant's job can talk to it. The policy selects every pod of the TrainJob (head, workers and
the submitter, of every attempt) and admits ingress only from:

- pods of the same TrainJob in its namespace, on every port (Ray's own traffic), and
- the peers the operator is configured with (`RAYTRAIN_NETWORK_POLICY_INGRESS`, the chart's
  `networkPolicy` values): by default KubeRay's operator pods, on the dashboard port, which
  KubeRay polls for the job's status.

The operator itself never connects to the pods: it reads what the runtime writes to the
TrainJob's status through the API server. Egress is left open: the pods reach the API server,
DNS, S3 and whatever the user's code downloads. Traffic from the pod's own node (the kubelet's
probes, `kubectl port-forward`) is not subject to NetworkPolicy in the common implementations.

A NetworkPolicy does something only where the cluster's network plugin enforces it; where none
does, it is inert and costs nothing.
"""

from __future__ import annotations

import json
from typing import Any

from raytrain_contract.meta import LABEL_TRAINJOB, Meta, child_metadata
from raytrain_operator.builders.names import network_policy_name

#: Ray's dashboard and job-submission port (KubeRay's default, and ours).
DASHBOARD_PORT = 8265
#: KubeRay's operator pods, wherever KubeRay runs: the label its Helm chart puts on them.
KUBERAY_POD_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}
#: The peers admitted when the operator is given none: KubeRay, to the dashboard.
DEFAULT_INGRESS: list[dict[str, Any]] = [
    {
        "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": KUBERAY_POD_LABELS}}],
        "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}],
    }
]
#: Where the operator reads the peers from (settings.py).
INGRESS_ENV = "RAYTRAIN_NETWORK_POLICY_INGRESS"
_RULE_KEYS = frozenset({"from", "ports"})
_PEER_KEYS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})


def parse_ingress(text: str, source: str = INGRESS_ENV) -> list[dict[str, Any]]:
    """The extra ingress rules of every job's policy: a JSON list of NetworkPolicyIngressRule.

    Checked at start-up, so a typo stops the operator with a message instead of making policies
    the API server refuses for every job.
    """
    try:
        rules = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON ({exc}); give a JSON list of ingress rules") from exc
    if not isinstance(rules, list):
        raise ValueError(
            f"{source}: {type(rules).__name__} given; give a JSON list of ingress rules "
            '(for example [{"from": [{"namespaceSelector": {...}}], "ports": [...]}])'
        )
    for i, rule in enumerate(rules):
        where = f"{source}[{i}]"
        if not isinstance(rule, dict):
            raise ValueError(f"{where}: {rule!r} is not an object with `from` and `ports`")
        unknown = sorted(set(rule) - _RULE_KEYS)
        if unknown:
            raise ValueError(
                f"{where}: unknown key {', '.join(unknown)}; an ingress rule has `from` and `ports`"
            )
        peers = rule.get("from")
        if not isinstance(peers, list) or not peers:
            # A rule without peers admits every source: that would undo the policy.
            raise ValueError(
                f"{where}.from: {peers!r}; name the peers to admit (a rule with no `from` "
                "admits every pod of the cluster)"
            )
        for j, peer in enumerate(peers):
            if not isinstance(peer, dict) or not peer or set(peer) - _PEER_KEYS:
                raise ValueError(
                    f"{where}.from[{j}]: {peer!r}; a peer has podSelector, namespaceSelector "
                    "or ipBlock"
                )
        ports = rule.get("ports", [])
        if not isinstance(ports, list) or not all(isinstance(p, dict) for p in ports):
            raise ValueError(f"{where}.ports: {ports!r} is not a list of ports")
    return rules


def pod_selector(meta: Meta) -> dict[str, Any]:
    """Every pod of the TrainJob: head, workers and submitter, of every attempt."""
    return {"matchLabels": {LABEL_TRAINJOB: meta.name}}


def build_network_policy(meta: Meta, ingress: list[dict[str, Any]]) -> dict[str, Any]:
    """The policy over the job's pods; `ingress` holds the rules beyond the job's own pods."""
    own = {"from": [{"podSelector": pod_selector(meta)}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(meta, network_policy_name(meta.name)),
        "spec": {
            "podSelector": pod_selector(meta),
            "policyTypes": ["Ingress"],
            "ingress": [own, *ingress],
        },
    }
