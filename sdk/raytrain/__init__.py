"""raytrain: the Python SDK of raytrain-operator's TrainJobs (trainjobs.raytrain.dev).

    from raytrain import TrainJobClient

    client = TrainJobClient()                       # kubeconfig, or the pod's account
    name = client.train("examples/digits.yaml")     # or a dict, or a typed TrainJobSpec
    job = client.wait_for_job_status(name, "Complete", timeout=3600)
    print(job.metrics, job.checkpoints.latest_uri)

docs/sdk.md has the whole tour. It needs only the `kubernetes` client, never Ray or torch.
"""

__version__ = "0.1.0"

from raytrain._dashboard import DashboardSession, DashboardTarget
from raytrain.checkpoints import CheckpointReport, StoredCheckpoint
from raytrain.client import TrainJobClient
from raytrain.errors import (
    ClusterUnreachableError,
    ConfigError,
    CRDNotInstalledError,
    DashboardUnavailableError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    LogsUnavailableError,
    NamespaceNotFoundError,
    RayTrainError,
    StorageAccessError,
    StorageNotReadableError,
    WaitTimeoutError,
)
from raytrain.models import Checkpoints, Condition, Event, TrainJob

__all__ = [
    "CRDNotInstalledError",
    "CheckpointReport",
    "Checkpoints",
    "ClusterUnreachableError",
    "Condition",
    "ConfigError",
    "DashboardSession",
    "DashboardTarget",
    "DashboardUnavailableError",
    "Event",
    "InvalidJobError",
    "JobExistsError",
    "JobFailedError",
    "JobNotFoundError",
    "JobStateError",
    "LogsUnavailableError",
    "NamespaceNotFoundError",
    "RayTrainError",
    "StorageAccessError",
    "StorageNotReadableError",
    "StoredCheckpoint",
    "TrainJob",
    "TrainJobClient",
    "WaitTimeoutError",
]
