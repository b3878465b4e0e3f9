"""The API client: from a kubeconfig, in-cluster config, or ~/.kube/config."""

from __future__ import annotations

from kubernetes import client


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client for the cluster: ``kubeconfig`` if given, else in-cluster, else ~/.kube/config."""
    from kubernetes import config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)
