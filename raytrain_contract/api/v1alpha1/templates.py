"""TrainJobTemplate and ClusterTrainJobTemplate: defaults a TrainJob names in spec.template.

Both kinds share one schema: the TrainJob spec's fields a template may set, all optional, with
the TrainJob's descriptions and limits (raytrain_contract.api.templates merges them).
"""

from __future__ import annotations

from typing import Any

from pydantic import create_model
from pydantic.fields import FieldInfo

from raytrain_contract.api.v1alpha1.common import Model
from raytrain_contract.api.v1alpha1.spec import TrainJobSpec

#: The fields a template may set: everything but what is one job's own (suspend, resumeFrom,
#: datasets, tune, the template reference).
TEMPLATE_FIELDS = (
    "image",
    "image_pull_policy",
    "entrypoint",
    "config",
    "ray_version",
    "scaling",
    "torch",
    "storage",
    "checkpoint",
    "failure",
    "disruption",
    "backoff_limit",
    "retry_policy",
    "head",
    "worker_template",
    "network",
    "queue_name",
    "active_deadline_seconds",
    "pre_running_deadline_seconds",
    "ttl_seconds_after_finished",
)


def _template_spec_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in TEMPLATE_FIELDS:
        info = TrainJobSpec.model_fields[name]
        optional = FieldInfo.merge_field_infos(info, default=None)
        optional.default_factory = None
        fields[name] = (info.annotation | None, optional)  # type: ignore[operator]
    return fields


#: The spec of a ClusterTrainJobTemplate or TrainJobTemplate: the TrainJob fields a template may
#: set, all optional, with the TrainJob's descriptions and limits. Nothing here is validated on
#: its own beyond the CRD's schema: the operator validates each TrainJob's spec once the
#: template is merged in.
TrainJobTemplateSpec: type[Model] = create_model(  # type: ignore[call-overload]
    "TrainJobTemplateSpec",
    __base__=Model,
    __doc__="Defaults for the TrainJobs that name this template in spec.template.",
    **_template_spec_fields(),
)


class TrainJobTemplate(Model):
    """Defaults shared by TrainJobs: image, pod overrides, storage, network, retry and failure
    settings. A TrainJob names it in spec.template; its own values win."""

    api_version: str | None = None
    """APIVersion of this object."""
    kind: str | None = None
    """Kind of this object."""
    metadata: dict[str, Any] | None = None
    """Standard object metadata."""
    spec: TrainJobTemplateSpec  # type: ignore[valid-type]
    """The defaults."""
