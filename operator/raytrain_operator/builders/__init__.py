"""Pure builders: a TrainJob in, child manifests out. No kopf, no Kubernetes client."""
