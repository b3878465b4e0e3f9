"""Writing a Gate's toggle annotations through the API server (the receiver's cluster side)."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.core.base import names
from admission.core.base.objects import Object


def cluster_patcher(api_client: client.ApiClient | None) -> Callable[[str, str, Object], None]:
    """Write a Gate's annotations through the API server, mapping its errors for the receiver."""
    custom = client.CustomObjectsApi(api_client)

    def patch_gate(namespace: str, name: str, patch: Object) -> None:
        try:
            custom.patch_namespaced_custom_object(
                names.GATING_GROUP, names.GATING_VERSION, namespace, names.GATE_PLURAL, name, patch
            )
        except ApiException as err:
            if err.status == 404:
                raise LookupError(name) from None
            raise PermissionError(f"API server answered {err.status} {err.reason}") from None

    return patch_gate
