"""The TrainJob API (`raytrain.dev/v1alpha1`): the models and the template merge, shared by the
operator (which parses and runs them) and the SDK and CLI (which submit and show them)."""
