"""TrainJob, the object: metadata, spec and status, and the rules on changes to a running job."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from raytrain_contract.api.v1alpha1.common import MAX_NAME_LENGTH, NAME_PATTERN, Model, rule
from raytrain_contract.api.v1alpha1.spec import TrainJobSpec
from raytrain_contract.api.v1alpha1.status import TrainJobStatus

#: What a running job cannot change (the checkpoints' place and what reads them).
IMMUTABLE_ONCE_STARTED = ("image", "entrypoint", "storage", "template", "code")


class TrainJob(Model):
    """A distributed training job run with Ray Train on a KubeRay cluster."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                rule(
                    f"self.metadata.name.matches('{NAME_PATTERN}')",
                    "metadata.name must start with a lower-case letter and hold only lower-case "
                    "letters, digits and '-' (a DNS-1035 label: it starts the names of the "
                    "RayJob's Services); choose a name such as digits-2",
                ),
                rule(
                    f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                    f"metadata.name must be at most {MAX_NAME_LENGTH} characters so that "
                    "every child name (RayJob, RayCluster, head service) fits in 63; "
                    "choose a shorter name",
                ),
                rule(
                    "!has(oldSelf.status) || !has(oldSelf.status.startTime) || "
                    "(has(oldSelf.spec.suspend) && oldSelf.spec.suspend) || ("
                    + " && ".join(
                        f"has(self.spec.{f}) == has(oldSelf.spec.{f}) && "
                        f"(!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f})"
                        for f in IMMUTABLE_ONCE_STARTED
                    )
                    + ")",
                    "spec.image, spec.entrypoint, spec.storage, spec.code and spec.template are "
                    "immutable once the job has started; set spec.suspend: true first, or create "
                    "a new TrainJob",
                    reason="FieldValueForbidden",
                    fieldPath=".spec",
                ),
                rule(
                    "!has(oldSelf.status) || (!has(oldSelf.status.startTime) && "
                    "!has(oldSelf.status.resumedFrom)) || "
                    "(has(self.spec.resumeFrom) == has(oldSelf.spec.resumeFrom) && "
                    "(!has(self.spec.resumeFrom) || "
                    "self.spec.resumeFrom == oldSelf.spec.resumeFrom))",
                    "spec.resumeFrom cannot change once the job has started or recorded "
                    "status.resumedFrom (its run already started from that checkpoint); create a "
                    "new TrainJob to start from another one",
                    reason="FieldValueForbidden",
                    fieldPath=".spec.resumeFrom",
                ),
            ]
        }
    )

    api_version: str | None = None
    """APIVersion of this object."""
    kind: str | None = None
    """Kind of this object."""
    metadata: dict[str, Any] | None = None
    """Standard object metadata."""
    spec: TrainJobSpec
    """Desired state."""
    status: TrainJobStatus | None = None
    """Observed state."""
