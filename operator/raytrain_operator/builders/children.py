"""The kinds of object a TrainJob owns, in one registry: a new child is a module and a line here.

Each `ChildKind` says where its API is (group, version, plural), how to build it from the
TrainJob (`build`, None when the job has it turned off), its name, in which round of an
attempt's writes it goes out, whether one turned off is deleted (`pruned`), and how to tell it
is ours. handlers/apply.py creates, brings in line and deletes the children by walking
`CHILDREN`; raytrain_operator.k8s derives its paths from it. The chart's RBAC must allow the
operator the new kind as well (charts/, the operator's ClusterRole, and the table in
docs/operator.md, which tests/unit/test_children_registry.py checks).

The rounds (handlers/apply.py says why): `FIRST_ROUND` beside the fence's reads (nothing that
names an attempt), `SECOND_ROUND` once the fence passed, `LAST_ROUND` (the RayJob) once all
the others exist. A new TrainJob's first pass has no fence: there, only what a child
`needs` (the RoleBinding its Role) keeps it out of the first round. `CHILDREN` is also the
order in which the children are deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.contract import build_contract_configmap
from raytrain_operator.builders.disruption import build_pod_disruption_budget
from raytrain_operator.builders.names import (
    contract_configmap_name,
    disruption_budget_name,
    network_policy_name,
    runtime_account_name,
)
from raytrain_operator.builders.network import build_network_policy
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.builders.rbac import build_role, build_role_binding, build_service_account

RAY_GROUP, RAY_VERSION, RAYJOBS = "ray.io", "v1", "rayjobs"
FIRST_ROUND, SECOND_ROUND, LAST_ROUND = 0, 1, 2


@dataclass(frozen=True)
class ChildContext:
    """What the children of one attempt are built from."""

    trainjob: TrainJob
    meta: Meta
    attempt: int
    resume_from: str | None = None
    suspend: bool = False
    #: Nodes the workers keep off when another can take them (status.hangs).
    avoid_nodes: Sequence[str] = ()
    #: Whether the job gets its NetworkPolicy, and the peers it admits (the operator's settings).
    network_policy: bool = True
    network_ingress: Sequence[Mapping[str, Any]] = ()


def owned_by(obj: Mapping[str, Any], meta: Meta) -> bool:
    """Whether `obj` carries the TrainJob's ownerReference (its uid)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == meta.uid for r in refs)


@dataclass(frozen=True)
class ChildKind:
    kind: str
    group: str
    version: str
    plural: str
    #: The body to create or apply; None when the job has this child turned off.
    build: Callable[[ChildContext], dict[str, Any] | None]
    #: Its name from the TrainJob's name; None for a child per attempt (the RayJob), which is
    #: found by the TrainJob's label instead.
    name: Callable[[str], str] | None
    #: The round of an attempt's writes it goes out in.
    round: int
    #: A child built as None is deleted (an earlier attempt's, made while it was on).
    pruned: bool = False
    #: Deleted in the foreground: it stays until its dependents (the RayJob's pods) are gone.
    foreground: bool = False
    #: Whether an object of this kind and name is ours (an object that is not is left alone).
    owned: Callable[[Mapping[str, Any], Meta], bool] = field(default=owned_by)
    #: Kinds the API server needs to exist before it takes this one (a RoleBinding: its Role).
    needs: tuple[str, ...] = ()

    @property
    def unfenced_round(self) -> int:
        """Its round in a new TrainJob's first pass, which has no fence to wait for
        (handlers/apply.py): after the kinds it needs, the RayJob last, the rest at once."""
        if self.round == LAST_ROUND:
            return LAST_ROUND
        return SECOND_ROUND if self.needs else FIRST_ROUND

    @property
    def per_attempt(self) -> bool:
        return self.name is None


def _contract(ctx: ChildContext) -> dict[str, Any]:
    return build_contract_configmap(ctx.trainjob, ctx.meta, ctx.attempt, ctx.resume_from)


def _service_account(ctx: ChildContext) -> dict[str, Any]:
    return build_service_account(ctx.meta)


def _role(ctx: ChildContext) -> dict[str, Any]:
    return build_role(ctx.meta)


def _role_binding(ctx: ChildContext) -> dict[str, Any]:
    return build_role_binding(ctx.trainjob, ctx.meta)


def _budget(ctx: ChildContext) -> dict[str, Any] | None:
    return build_pod_disruption_budget(ctx.trainjob, ctx.meta)


def _policy(ctx: ChildContext) -> dict[str, Any] | None:
    if not ctx.network_policy:
        return None
    return build_network_policy(ctx.meta, [dict(rule) for rule in ctx.network_ingress])


def _rayjob(ctx: ChildContext) -> dict[str, Any]:
    return build_rayjob(
        ctx.trainjob, ctx.meta, ctx.attempt, suspend=ctx.suspend, avoid_nodes=ctx.avoid_nodes
    )


RBAC = "rbac.authorization.k8s.io"

#: Every child of a TrainJob, in the order they are deleted.
CHILDREN: tuple[ChildKind, ...] = (
    ChildKind(
        "RayJob",
        RAY_GROUP,
        RAY_VERSION,
        RAYJOBS,
        build=_rayjob,
        name=None,
        round=LAST_ROUND,
        foreground=True,
    ),
    ChildKind(
        "ConfigMap",
        "",
        "v1",
        "configmaps",
        build=_contract,
        name=contract_configmap_name,
        round=SECOND_ROUND,
    ),
    ChildKind(
        "RoleBinding",
        RBAC,
        "v1",
        "rolebindings",
        build=_role_binding,
        name=runtime_account_name,
        round=SECOND_ROUND,
        needs=("Role",),
    ),
    ChildKind(
        "Role", RBAC, "v1", "roles", build=_role, name=runtime_account_name, round=FIRST_ROUND
    ),
    ChildKind(
        "ServiceAccount",
        "",
        "v1",
        "serviceaccounts",
        build=_service_account,
        name=runtime_account_name,
        round=FIRST_ROUND,
    ),
    ChildKind(
        "PodDisruptionBudget",
        "policy",
        "v1",
        "poddisruptionbudgets",
        build=_budget,
        name=disruption_budget_name,
        round=SECOND_ROUND,
        pruned=True,
    ),
    ChildKind(
        "NetworkPolicy",
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        build=_policy,
        name=network_policy_name,
        round=SECOND_ROUND,
        pruned=True,
    ),
)

#: The registry by kind.
BY_KIND: dict[str, ChildKind] = {child.kind: child for child in CHILDREN}


def build_children(ctx: ChildContext) -> dict[str, dict[str, Any] | None]:
    """Every child's body for this attempt, by kind (None: turned off). Raises what a builder
    raises: SpecError for the spec's problem, anything else is a bug."""
    return {child.kind: child.build(ctx) for child in CHILDREN}
