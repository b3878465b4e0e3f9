"""Reaching the cluster kubeconfig selects, and API failures as one line and an exit code a script can rely on."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from admission.core.base import names

(
    EXIT_OK,
    EXIT_DENIED,
    EXIT_USAGE,
    EXIT_NOT_FOUND,
    EXIT_FORBIDDEN,
    EXIT_NO_CLUSTER,
    EXIT_BAD_GATES_DIR,
    EXIT_CONFLICT,
    EXIT_REFUSED,
    EXIT_API_ERROR,
) = range(10)
# check: an object the API server did not let the webhook judge (the webhook down, the dry-run
# forbidden, the object invalid or conflicting): never reported as allowed.
EXIT_UNJUDGED = 10

# kubectl waits for ever by default; a command here gives up on one API call after this long
# (--request-timeout; docs/decisions/0080-the-cli-as-kubectl-users-expect-it.md).
DEFAULT_REQUEST_TIMEOUT = 30.0


class GateError(Exception):
    """A failure to report in one line, with the exit code that classifies it."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@dataclass
class Cluster:
    """The API clients and default namespace that kubeconfig (and flags) select."""

    api: Any  # a kubernetes.client.ApiClient, imported only when a command needs the cluster
    namespace: str
    user: str | None

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)


def kubeconfig_context(args: argparse.Namespace) -> dict[str, Any]:
    """The kubeconfig context that --context (else the current one) selects: its ``context``
    entry holds ``cluster``, ``user`` and ``namespace``. Raises ConfigException without one."""
    from kubernetes import config

    contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig)
    context = next((c for c in contexts if c["name"] == args.context), None) if args.context else current
    if args.context and context is None:
        raise GateError(f"context {args.context!r} not found in kubeconfig", EXIT_USAGE)
    return context or {}


def context_namespace(args: argparse.Namespace) -> str:
    """-n, else the kubeconfig context's namespace, else ``default``: without connecting, so that
    commands reading --gates-dir default to the namespace the cluster commands do."""
    if args.namespace:
        return str(args.namespace)
    from kubernetes import config

    try:
        details = kubeconfig_context(args).get("context") or {}
    except (config.ConfigException, OSError, ValueError):  # no kubeconfig: nothing to follow
        return names.DEFAULT_NAMESPACE
    return str(details.get("namespace") or names.DEFAULT_NAMESPACE)


def connect(args: argparse.Namespace) -> Cluster:
    from kubernetes import client, config

    try:
        context = kubeconfig_context(args)
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=args.kubeconfig, context=args.context, client_configuration=configuration
        )
        from admission.kube.client import NO_RETRIES, quiet_insecure_warnings

        quiet_insecure_warnings(configuration)
        # As the server's client: a call fails once, at once. urllib3's default three retries
        # would make a completer against an unreachable cluster hang its shell for seconds.
        configuration.retries = NO_RETRIES
    except config.ConfigException as err:
        raise GateError(f"no cluster: {err}", EXIT_NO_CLUSTER) from None
    details = (context or {}).get("context") or {}
    api = client.ApiClient(configuration)
    timed(api, getattr(args, "request_timeout", DEFAULT_REQUEST_TIMEOUT))
    impersonate(api, kubeconfig_impersonation(args, details.get("user")))
    return Cluster(
        api,
        args.namespace or details.get("namespace") or names.DEFAULT_NAMESPACE,
        details.get("user"),
    )


def timed(api: Any, seconds: float | None) -> None:
    """Give every call ``api`` makes a deadline of ``seconds`` (None: none) for its whole exchange,
    connecting included, unless the call names its own (completion's shorter one). At the REST
    layer, which every generated API method and every client version calls with this keyword."""
    request = api.rest_client.request

    def with_deadline(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(*args, _request_timeout=_request_timeout or seconds, **kwargs)

    api.rest_client.request = with_deadline


@dataclass(frozen=True)
class Impersonation:
    """Who the API server is asked to act as: a kubeconfig user entry's ``as``, ``as-groups`` and
    ``as-uid``, as kubectl sends them (the Python client ignores them), or ``check --judge-as``."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str | None = None


def kubeconfig_impersonation(args: argparse.Namespace, user_entry: str | None) -> Impersonation | None:
    """The impersonation the kubeconfig's user entry ``user_entry`` asks for, None without."""
    from kubernetes.config import ConfigException, kube_config

    if not user_entry:
        return None
    try:
        merged = kube_config.KubeConfigMerger(args.kubeconfig or kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
        users = [plain(u) for u in plain(merged.config).get("users") or []]
    except (ConfigException, OSError, ValueError, AttributeError):
        return None
    entry = next(
        (u.get("user") or {} for u in users if isinstance(u, dict) and u.get("name") == user_entry), {}
    )
    user = entry.get("as") if isinstance(entry, dict) else None
    if not isinstance(user, str) or not user:
        return None
    groups = entry.get("as-groups") or []
    uid = entry.get("as-uid")
    return Impersonation(user, tuple(str(g) for g in groups), str(uid) if uid else None)


def plain(node: Any) -> Any:
    """A merged kubeconfig's node (the client wraps what it merges) as the plain value it holds."""
    return getattr(node, "value", node) if node is not None else {}


def impersonate(api: Any, who: Impersonation | None) -> None:
    """Send every call ``api`` makes as ``who`` (Impersonate-* headers, one per group, as
    kubectl sends them). Impersonation set by a wrapper installed later (called first) wins, as
    kubectl's --as wins over the kubeconfig's ``as``."""
    if who is None:
        return
    from urllib3 import HTTPHeaderDict

    request = api.rest_client.request

    def as_who(*args: Any, headers: Any = None, **kwargs: Any) -> Any:
        sent = HTTPHeaderDict(headers or {})
        if "Impersonate-User" not in sent:
            sent["Impersonate-User"] = who.user
            for group in who.groups:
                sent.add("Impersonate-Group", group)
            if who.uid:
                sent["Impersonate-Uid"] = who.uid
        return request(*args, headers=sent, **kwargs)

    api.rest_client.request = as_who


def api_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn API and connection failures into one line and an exit code."""

    def wrapped(args: argparse.Namespace) -> int:
        with api_failures():
            return fn(args)

    return wrapped


@contextlib.contextmanager
def api_failures() -> Iterator[None]:
    """API and connection failures within, raised again as GateError: one line and an exit code."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError, NewConnectionError
    from urllib3.exceptions import TimeoutError as TimedOut

    try:
        yield
    except ApiException as err:
        detail = api_message(err)
        if err.status == 404:
            raise GateError(detail, EXIT_NOT_FOUND) from None
        if err.status in (401, 403):
            raise GateError(f"forbidden: {detail}", EXIT_FORBIDDEN) from None
        # The API server answered: the cluster is there, and retrying blindly may not help.
        if err.status == 409:
            raise GateError(
                f"conflict: {detail} (the object changed meanwhile: run the command again)", EXIT_CONFLICT
            ) from None
        if err.status in (400, 422):
            raise GateError(f"refused by the API server as invalid: {detail}", EXIT_REFUSED) from None
        raise GateError(f"the API server answered {err.status}: {detail}", EXIT_API_ERROR) from None
    except HTTPError as err:
        cause = getattr(err, "reason", None) or err
        # urllib3 makes a refused connection a kind of timeout, for compatibility: it is not one.
        if isinstance(cause, TimedOut) and not isinstance(cause, NewConnectionError):
            raise GateError(
                f"no cluster: the API server did not answer in time (--request-timeout): {err}",
                EXIT_NO_CLUSTER,
            ) from None
        raise GateError(f"no cluster: {err}", EXIT_NO_CLUSTER) from None


def api_message(err: Any) -> str:
    try:
        # ``err``: the kubernetes client's ApiException, whose body and reason it leaves untyped.
        message: str = orjson.loads(err.body).get("message") or err.reason
        return message
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)
