"""What a TrainJob may put into its pods past the restricted Pod Security profile: a volume type
outside its list, or hostNetwork. An administrator grants either for every job (chart values
podOverrides.volumeTypes / allowHostNetwork) or for the jobs that name a ClusterTrainJobTemplate
that sets it; nobody else can (handlers/preflight.py, pod_policy_problem)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from _factories import BASE

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator.handlers.preflight import RESTRICTED_VOLUME_TYPES, pod_policy_problem
from raytrain_operator.settings import OperatorConfig

PROC = {"name": "host-proc", "hostPath": {"path": "/proc"}}
MOUNT = {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
NFS = {"name": "datasets", "nfs": {"server": "filer", "path": "/datasets"}}
DEFAULTS = OperatorConfig()


def merged(own: dict[str, Any], template: dict[str, Any] | None = None) -> TrainJob:
    spec = templates.merge(template, own) if template else own
    return TrainJob.model_validate({"metadata": BASE["metadata"], "spec": spec})


def own_spec(**extra: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE["spec"])
    spec.update(extra)
    return spec


def test_the_defaults_grant_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYTRAIN_ALLOW_HOST_NETWORK", raising=False)
    monkeypatch.delenv("RAYTRAIN_VOLUME_TYPES", raising=False)
    config = OperatorConfig()
    assert config.allow_host_network is False and config.volume_types == frozenset()


def test_a_host_path_is_refused_naming_the_field_the_value_and_who_can_grant_it() -> None:
    spec = own_spec(workerTemplate={"volumes": [PROC], "volumeMounts": [MOUNT]})
    problem = pod_policy_problem(merged(spec), DEFAULTS, spec, {})
    assert problem is not None
    reason, message = problem
    assert reason == "OverrideForbidden"
    assert message.startswith(
        "spec.workerTemplate.volumes[0] ('host-proc'): a hostPath volume "
        '({"path": "/proc"}) is not allowed here'
    )
    assert "podOverrides.volumeTypes" in message and "ClusterTrainJobTemplate" in message


@pytest.mark.parametrize("kind", sorted(RESTRICTED_VOLUME_TYPES))
def test_the_restricted_profiles_volume_types_pass(kind: str) -> None:
    volume = {"name": "v", kind: {}}
    spec = own_spec(head={"volumes": [volume]})
    assert pod_policy_problem(merged(spec), DEFAULTS, spec, {}) is None


def test_the_chart_value_grants_a_type_to_every_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYTRAIN_VOLUME_TYPES", "nfs, hostPath")
    config = OperatorConfig()
    assert config.volume_types == {"nfs", "hostPath"}
    spec = own_spec(workerTemplate={"volumes": [NFS, PROC]})
    assert pod_policy_problem(merged(spec), config, spec, {}) is None
    only_nfs = OperatorConfig(volume_types=frozenset({"nfs"}))
    problem = pod_policy_problem(merged(spec), only_nfs, spec, {})
    assert problem is not None and "volumes[1] ('host-proc')" in problem[1]


def test_host_network_is_refused_unless_granted(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = own_spec(head={"hostNetwork": True})
    problem = pod_policy_problem(merged(spec), DEFAULTS, spec, {})
    assert problem is not None
    assert problem[1].startswith("spec.head.hostNetwork: true is not allowed here")
    assert "podOverrides.allowHostNetwork" in problem[1]
    monkeypatch.setenv("RAYTRAIN_ALLOW_HOST_NETWORK", "true")
    assert pod_policy_problem(merged(spec), OperatorConfig(), spec, {}) is None


def test_a_cluster_template_grants_what_it_sets_to_the_jobs_that_name_it() -> None:
    template = {"workerTemplate": {"volumes": [PROC], "hostNetwork": True}}
    own = own_spec(template={"name": "node-debug"}, workerTemplate={"volumeMounts": [MOUNT]})
    assert pod_policy_problem(merged(own, template), DEFAULTS, own, template) is None


def test_a_namespaced_template_grants_nothing() -> None:
    template = {"workerTemplate": {"volumes": [PROC]}}
    own = own_spec(template={"kind": "TrainJobTemplate", "name": "mine"})
    problem = pod_policy_problem(merged(own, template), DEFAULTS, own, template)
    assert problem is not None and "hostPath" in problem[1]


def test_a_job_cannot_change_what_the_cluster_template_granted() -> None:
    """The job's own entry of the same name replaces the template's: it is the job's volume."""
    template = {"workerTemplate": {"volumes": [PROC]}}
    elsewhere = {"name": "host-proc", "hostPath": {"path": "/var/run"}}
    own = own_spec(template={"name": "node-debug"}, workerTemplate={"volumes": [elsewhere]})
    problem = pod_policy_problem(merged(own, template), DEFAULTS, own, template)
    assert problem is not None and '"/var/run"' in problem[1]
    # Nor can it set hostNetwork itself beside a template that grants only volumes.
    own = own_spec(template={"name": "node-debug"}, head={"hostNetwork": True})
    problem = pod_policy_problem(merged(own, template), DEFAULTS, own, template)
    assert problem is not None and problem[1].startswith("spec.head.hostNetwork")


def test_a_network_profile_needs_a_grant(monkeypatch: pytest.MonkeyPatch) -> None:
    """spec.network adds IPC_LOCK to the workers: past the restricted profile."""
    network = {"profile": "infiniband", "devicesPerPod": 1}
    spec = own_spec(network=network)
    problem = pod_policy_problem(merged(spec), DEFAULTS, spec, {})
    assert problem is not None
    assert problem[1].startswith("spec.network: profile infiniband is not allowed here")
    assert "IPC_LOCK" in problem[1] and "podOverrides.allowNetworkProfiles" in problem[1]
    monkeypatch.setenv("RAYTRAIN_ALLOW_NETWORK_PROFILES", "true")
    assert pod_policy_problem(merged(spec), OperatorConfig(), spec, {}) is None
    # From a ClusterTrainJobTemplate: granted; from a namespaced one: not.
    template = {"network": network}
    own = own_spec(template={"name": "rdma"})
    assert pod_policy_problem(merged(own, template), DEFAULTS, own, template) is None
    own = own_spec(template={"kind": "TrainJobTemplate", "name": "rdma"})
    assert pod_policy_problem(merged(own, template), DEFAULTS, own, template) is not None


@pytest.mark.parametrize(
    ("field", "value", "setting", "env"),
    [
        ("runtimeClassName", "nvidia", "podOverrides.runtimeClasses", "RAYTRAIN_RUNTIME_CLASSES"),
        ("schedulerName", "volcano", "podOverrides.schedulers", "RAYTRAIN_SCHEDULERS"),
    ],
)
def test_a_runtime_class_or_scheduler_needs_a_grant(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str, setting: str, env: str
) -> None:
    """A runtime class picks the node's container runtime handler (nvidia's hands the pod every
    GPU of the node, past the device plugin); a scheduler picks who places the pod (past quotas
    and taints the default scheduler keeps). Neither is the job's to choose unless granted."""
    spec = own_spec(workerTemplate={field: value})
    problem = pod_policy_problem(merged(spec), DEFAULTS, spec, {})
    assert problem is not None
    reason, message = problem
    assert reason == "OverrideForbidden"
    assert message.startswith(f"spec.workerTemplate.{field}: {value!r} is not allowed here")
    assert setting in message and "ClusterTrainJobTemplate" in message
    monkeypatch.setenv(env, f"other, {value}")
    assert pod_policy_problem(merged(spec), OperatorConfig(), spec, {}) is None
    monkeypatch.setenv(env, "other")
    assert pod_policy_problem(merged(spec), OperatorConfig(), spec, {}) is not None
    # From a ClusterTrainJobTemplate: granted to the jobs that name it; a namespaced one: not.
    template = {"head": {field: value}}
    own = own_spec(template={"name": "gpu-nodes"})
    assert pod_policy_problem(merged(own, template), DEFAULTS, own, template) is None
    own = own_spec(template={"kind": "TrainJobTemplate", "name": "gpu-nodes"})
    problem = pod_policy_problem(merged(own, template), DEFAULTS, own, template)
    assert problem is not None and problem[1].startswith(f"spec.head.{field}")
    # A job that names the cluster template cannot pick another value itself.
    own = own_spec(template={"name": "gpu-nodes"}, head={field: "elsewhere"})
    problem = pod_policy_problem(merged(own, template), DEFAULTS, own, template)
    assert problem is not None and "'elsewhere'" in problem[1]


def test_the_default_scheduler_needs_no_grant() -> None:
    spec = own_spec(head={"schedulerName": "default-scheduler"})
    assert pod_policy_problem(merged(spec), DEFAULTS, spec, {}) is None
