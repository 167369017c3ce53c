"""The Kubernetes transport: merge patches to the TrainJob's ``status`` subresource.

In a pod it uses the service account (in-cluster config); elsewhere ``KUBECONFIG``. The per-job
Role allows ``get`` and ``patch`` on ``trainjobs/status`` of this TrainJob only, so the TrainJob
is read through the status subresource too (it returns the whole object, annotations included).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

GROUP, VERSION, PLURAL = "raytrain.dev", "v1alpha1", "trainjobs"
_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class KubernetesTransport:
    def __init__(self, namespace: str, name: str, *, kubeconfig: str | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self._kubeconfig = kubeconfig
        self._api: Any = None

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            if self._kubeconfig is None and os.path.exists(_TOKEN):
                config.load_incluster_config()
                api_client = client.ApiClient()
            else:
                api_client = config.new_client_from_config(config_file=self._kubeconfig)
            self._api = client.CustomObjectsApi(api_client)
        return self._api

    def patch_status(self, body: dict[str, Any]) -> None:
        self._client().patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=10,
        )

    def read_trainjob(self) -> Mapping[str, Any] | None:
        obj = self._client().get_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURAL, self.name, _request_timeout=10
        )
        return obj if isinstance(obj, Mapping) else None
