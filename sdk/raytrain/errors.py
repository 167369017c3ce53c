"""What the SDK raises: one base class, and a subclass per thing a caller may handle.

Each also derives from the builtin a Python user would try first (``LookupError`` for a missing
job, ``TimeoutError`` for a wait that ran out, ``ValueError`` for a bad manifest), so
``except TimeoutError`` works as it does with Kubeflow's TrainerClient. Every message names the
object, the namespace and, where there is one, the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytrain.models import TrainJob


class RayTrainError(Exception):
    """Base class of every error the SDK raises on purpose."""


class ConfigError(RayTrainError):
    """No usable Kubernetes configuration: no kubeconfig, an unknown context, no pod token."""


class ClusterUnreachableError(RayTrainError, ConnectionError):
    """The API server did not answer."""


class CRDNotInstalledError(RayTrainError, LookupError):
    """The cluster does not serve trainjobs.raytrain.dev."""


class NamespaceNotFoundError(RayTrainError, LookupError):
    """The namespace asked for does not exist."""


class JobNotFoundError(RayTrainError, LookupError):
    """No TrainJob of that name in that namespace."""


class JobExistsError(RayTrainError, FileExistsError):
    """A TrainJob (or another object of the manifest) of that name already exists."""


class InvalidJobError(RayTrainError, ValueError):
    """The manifest is malformed, or the API server refused it (the message says which field)."""


class JobStateError(RayTrainError):
    """The job is in a state where the operation means nothing (suspending a finished job)."""


class LogsUnavailableError(RayTrainError):
    """The driver's log cannot be read now; the message says why and what to do."""


class DashboardUnavailableError(RayTrainError):
    """The job has no Ray dashboard to reach now, or kubectl cannot forward to it."""


class JobFailedError(RayTrainError, RuntimeError):
    """The job failed while the caller waited for another status."""

    def __init__(self, message: str, job: TrainJob) -> None:
        super().__init__(message)
        self.job = job


class WaitTimeoutError(RayTrainError, TimeoutError):
    """The job did not reach the wanted status in time; ``job`` is the last state seen."""

    def __init__(self, message: str, job: TrainJob | None) -> None:
        super().__init__(message)
        self.job = job


class StorageAccessError(RayTrainError):
    """This machine cannot read the job's storage: no credentials, access refused, an endpoint
    it cannot reach, no such bucket (the message says which, and what to set)."""


class StorageNotReadableError(StorageAccessError):
    """The job's storage is a PVC, which only pods can mount: this machine cannot read it."""
