"""The API client: from a kubeconfig, in-cluster config, or ~/.kube/config."""

from __future__ import annotations

import logging
import warnings

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3 import Retry
from urllib3.exceptions import HTTPError, MaxRetryError

# Every caller has its own answer to a failed call (a watch backs off and relists, an Event is
# dropped and counted): urllib3's three silent retries only multiply the wait, and log a
# warning each, per call, while the API server is unreachable.
NO_RETRIES = Retry(total=0, redirect=0, raise_on_redirect=False)
# Errors of a call to the API server (network, TLS, HTTP status): logged as one line, no traceback.
CALL_ERRORS = (ApiException, HTTPError, OSError)

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
        log.warning(
            "the API server's certificate is not verified (insecure-skip-tls-verify in the kubeconfig)"
        )
    quiet_insecure_warnings(configuration)
    configuration.retries = NO_RETRIES
    return client.ApiClient(configuration)


def describe_error(err: BaseException) -> str:
    """One short line for a failed call: the status of an API error, the cause of a network one."""
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    if isinstance(err, MaxRetryError) and err.reason is not None:
        err = err.reason
    text = str(err)
    # urllib3 prefixes the connection's repr ("HTTPSConnection(host=..., port=...): ..."); the
    # URL is the same for every call and says nothing about why this one failed.
    _, sep, rest = text.partition("): ")
    return f"{type(err).__name__}: {rest if sep else text}"[:500]


def quiet_insecure_warnings(configuration: client.Configuration) -> None:
    """urllib3 warns on every request when certificate checks are off; the caller says so once
    instead (logs stay JSON lines, kubectl gate's stderr stays readable)."""
    if not configuration.verify_ssl:
        from urllib3.exceptions import InsecureRequestWarning

        warnings.filterwarnings("ignore", category=InsecureRequestWarning)
