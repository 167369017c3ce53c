"""Checks that must pass before a RayJob is created: the storage and the credentials exist.

A Ray cluster that starts without its checkpoint storage wastes GPUs and then fails in a way
that is hard to read; these checks fail early, with the field, the object and the fix.
Only key names are read from a Secret.
"""

from __future__ import annotations

from raytrain_operator import k8s
from raytrain_operator.api.v1alpha1 import TrainJob
from raytrain_operator.builders.meta import Meta


def check(trainjob: TrainJob, meta: Meta) -> tuple[str, str] | None:
    """(reason, message) of the first problem found, or None when the RayJob can be created."""
    ns = meta.namespace
    storage = trainjob.spec.storage
    if storage.pvc is not None:
        claim = storage.pvc.claim_name
        modes = k8s.pvc_access_modes(ns, claim)
        if modes is None:
            return (
                "StorageNotFound",
                f"spec.storage.pvc.claimName: PersistentVolumeClaim {claim!r} does not exist in "
                f"namespace {ns!r}; create it with accessModes [ReadWriteMany] "
                "(see examples/digits-pvc.yaml) or point claimName at an existing claim",
            )
        if "ReadWriteMany" not in modes:
            return (
                "StorageNotShared",
                f"spec.storage.pvc.claimName: PersistentVolumeClaim {claim!r} has accessModes "
                f"{modes}; the head and every worker mount it at once, which needs "
                "ReadWriteMany: create a ReadWriteMany claim (NFS, CephFS, EFS...) and set "
                "claimName to it",
            )
    if storage.s3 is not None and storage.s3.credentials_secret is not None:
        ref = storage.s3.credentials_secret
        keys = k8s.secret_keys(ns, ref.name)
        if keys is None:
            return (
                "CredentialsNotFound",
                f"spec.storage.s3.credentialsSecret.name: Secret {ref.name!r} does not exist in "
                f"namespace {ns!r}; create it with the keys {ref.access_key_id_key} and "
                f"{ref.secret_access_key_key}",
            )
        wanted = [
            ("accessKeyIdKey", ref.access_key_id_key),
            ("secretAccessKeyKey", ref.secret_access_key_key),
        ]
        if ref.session_token_key:
            wanted.append(("sessionTokenKey", ref.session_token_key))
        for field, key in wanted:
            if key not in keys:
                present = ", ".join(sorted(keys)) or "none"
                return (
                    "CredentialsIncomplete",
                    f"spec.storage.s3.credentialsSecret: Secret {ref.name!r} has no key {key!r} "
                    f"(keys present: {present}); add the key to the Secret or set "
                    f"credentialsSecret.{field} to the key that holds it",
                )
    if storage.s3 is not None and storage.s3.service_account_name:
        account = storage.s3.service_account_name
        if not k8s.service_account_exists(ns, account):
            return (
                "ServiceAccountNotFound",
                f"spec.storage.s3.serviceAccountName: ServiceAccount {account!r} does not exist "
                f"in namespace {ns!r}; create it with its cloud identity (for IRSA the "
                "eks.amazonaws.com/role-arn annotation)",
            )
    return None
