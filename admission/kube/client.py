"""The API client: from a kubeconfig, in-cluster config, or ~/.kube/config."""

from __future__ import annotations

import logging
import warnings

from kubernetes import client

log = logging.getLogger(__name__)


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
    if not configuration.verify_ssl:
        log.warning("the API server's certificate is not verified (insecure-skip-tls-verify in the kubeconfig)")
    quiet_insecure_warnings(configuration)
    return client.ApiClient(configuration)


def quiet_insecure_warnings(configuration: client.Configuration) -> None:
    """urllib3 warns on every request when certificate checks are off; the caller says so once
    instead (logs stay JSON lines, kubectl gate's stderr stays readable)."""
    if not configuration.verify_ssl:
        from urllib3.exceptions import InsecureRequestWarning
        warnings.filterwarnings("ignore", category=InsecureRequestWarning)
