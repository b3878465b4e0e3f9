"""Leader election through a coordination.k8s.io Lease, so one controller replica acts."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.clock import utcnow
from admission.core.base.timefmt import format_distinct_time
from admission.observability.controllermetrics import API_ERRORS

log = logging.getLogger(__name__)


class LeaderElector:
    """Holds a Lease while this process is the leader; renews it, and lets it go on stop."""

    def __init__(
        self,
        api_client: client.ApiClient | None,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_every: float = 5.0,
        *,
        clock: Callable[[], datetime] = utcnow,
        coordination: client.CoordinationV1Api | None = None,
        on_fatal: Callable[[str], None] = lambda why: None,
    ):
        # ``coordination`` replaces the API group built from ``api_client`` (tests' fakes).
        self.api = coordination or client.CoordinationV1Api(api_client)
        self.clock = clock
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_every = lease_seconds, renew_every
        self.is_leader = threading.Event()
        self._stopped = threading.Event()
        self.on_fatal = on_fatal  # called once with the reason when a Lease can never be held
        self._reached = False  # the Lease API has answered us at least once

    def _try(self) -> bool:
        now = self.clock()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": format_distinct_time(now),
        }
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": format_distinct_time(now), "leaseTransitions": 0},
            }
            # The client validates a dict body into the model, as the API server reads it.
            self.api.create_namespaced_lease(self.namespace, body)  # type: ignore[arg-type]
            return True
        lease_spec, lease_meta = lease.spec, lease.metadata
        assert lease_spec is not None and lease_meta is not None  # a stored Lease has both
        held_by = lease_spec.holder_identity
        renewed = lease_spec.renew_time
        duration = lease_spec.lease_duration_seconds or self.lease_seconds
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if held_by != self.identity and not expired:
            return False
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease_meta.resource_version,
            },
            "spec": {
                **spec,
                "acquireTime": format_distinct_time(lease_spec.acquire_time)
                if held_by == self.identity and lease_spec.acquire_time
                else format_distinct_time(now),
                "leaseTransitions": (lease_spec.lease_transitions or 0) + (held_by != self.identity),
            },
        }
        # 409 if someone else won. A dict body, validated into the model by the client.
        self.api.replace_namespaced_lease(self.name, self.namespace, body)  # type: ignore[arg-type]
        return True

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                leader = self._try()
                self._reached = True
            except ApiException as err:
                API_ERRORS.labels("lease").inc()
                if err.status in (403, 404) and not self._reached:
                    # Before we ever held or read the Lease: a namespace that does not exist
                    # (404 on create) or one we may not use (403) will not fix itself.
                    why = f"cannot hold Lease {self.namespace}/{self.name}: " + (
                        f"namespace {self.namespace!r} does not exist"
                        if err.status == 404
                        else f"forbidden in namespace {self.namespace!r} (does it exist, and does our Role cover it?)"
                    )
                    log.error("leader election impossible", extra={"lease": self.name, "error": why})
                    self.on_fatal(why)
                    return
                log.warning(
                    "lease not renewed", extra={"lease": self.name, "error": f"{err.status} {err.reason}"}
                )
                leader = False
            except Exception as err:  # noqa: BLE001 (outages, and anything else: not the leader until a renewal works; a dead loop would stay leader)
                API_ERRORS.labels("lease").inc()
                log.warning("lease not renewed", extra={"lease": self.name, "error": str(err)})
                leader = False
            if leader and not self.is_leader.is_set():
                log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                self.is_leader.set()
            elif not leader and self.is_leader.is_set():
                log.warning("lost leadership", extra={"lease": self.name, "identity": self.identity})
                self.is_leader.clear()
            self._stopped.wait(self.renew_every)

    def start(self) -> None:
        threading.Thread(target=self.run, name="leader-election", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        if self.is_leader.is_set():
            self.is_leader.clear()
            try:  # hand over at once instead of making the next leader wait out the lease
                lease = self.api.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is not None and lease.spec.holder_identity == self.identity:
                    self.api.patch_namespaced_lease(
                        self.name, self.namespace, {"spec": {"holderIdentity": None, "renewTime": None}}
                    )
            except Exception:  # noqa: BLE001 (the lease lapses by itself: releasing it only saves time)
                pass
