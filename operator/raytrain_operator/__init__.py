"""raytrain-operator: a Kubernetes operator for distributed training with Ray Train."""

__version__ = "0.1.0"
