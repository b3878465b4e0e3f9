"""`gate-admission serve`'s parts, built from its configuration (`admission.cli.config`) and
handed to `create_app`: what must be readable is read once in the master (`prepare`: an error
there exits 2 before any worker starts), the rest per worker (`build`: caches, watches, threads).

Imported by `serve` only once PROMETHEUS_MULTIPROC_DIR is set: the metrics it imports choose
then whether workers count into shared files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from flask import Flask

from admission.cli.boardmount import board as read_only_board
from admission.cli.config import ServeConfig, UsageError, approval_key
from admission.clock import utcnow
from admission.core.admission.decision import Settings
from admission.core.flux.kinds import CACHED_KINDS
from admission.kube.attempts import DeniedAttempts
from admission.kube.client import api_client
from admission.kube.events import DenialEvents
from admission.kube.fluxcache import FluxCache
from admission.kube.gatewriter import cluster_patcher
from admission.kube.reflector import ClusterStore
from admission.observability import logs
from admission.observability.metrics import RECEIVER
from admission.store import GateStore, StaticSources
from admission.store.files import FileStore
from admission.webhook import receiver as hooks
from admission.webhook.app import Parts, create_app


@dataclass(frozen=True)
class Prepared:
    """A configuration whose files were read: every worker builds from the same."""

    config: ServeConfig
    settings: Settings  # the configuration's, with the approval key


def prepare(config: ServeConfig) -> Prepared:
    """Read, in the master, what every worker needs the same of; UsageError if any cannot be."""
    # A gates directory is written by whoever may write its files: no approval there is sealed.
    key = (
        None
        if config.gates_dir
        else approval_key(config.approval_key_file, config.cert_dir if config.generate_certs else None)
    )
    for what, path, read in (
        ("receiver token", config.receiver_token_file, hooks.ReceiverTokens),
        ("calendar token", config.calendar_token_file, hooks.TokenFile),
    ):
        if path:
            try:
                read(path)
            except (OSError, ValueError) as err:
                raise UsageError(f"{what}: {err}") from None
    return Prepared(config, replace(config.settings, approval_key=key))


def build(prepared: Prepared) -> Flask:
    """One worker's app: its store and sources started, its parts wired."""
    config, settings = prepared.config, prepared.settings
    logs.configure(config.log_level)
    parts: Parts = {
        "calendar": config.calendar,
        "calendar_wait": config.calendar_wait,
        "certfile": str(config.cert_files.cert),
    }
    store: GateStore
    if config.gates_dir:
        store = FileStore(config.gates_dir)
        sources = StaticSources()  # no cluster, no Flux objects (docs/design.md, "Hold points")
        store.start()
        sources.start()
        parts["sources"] = sources
        listing = None
        where = f"gate-admission serve --gates-dir {config.gates_dir}"
    else:
        api = api_client(config.kubeconfig)
        cluster = ClusterStore(api, stale_after=config.stale_after, approval_key=settings.approval_key)
        # What each source serves, and HelmReleases: read by the hold points, per worker.
        flux = FluxCache(api, sorted(CACHED_KINDS), stale_after=config.stale_after)
        if config.receiver_token_file:
            # Rate limits in files every worker maps: one limit for the pod, not one per worker.
            parts["receiver"] = hooks.blueprint(
                hooks.ReceiverTokens(config.receiver_token_file),
                cluster_patcher(api),
                utcnow,
                record=lambda result: RECEIVER.labels(result).inc(),
                limits_dir=config.limits_dir,
            )
        if config.event_period > 0:
            events = DenialEvents(
                api,
                cluster.lookup,
                settings,
                flux,
                period=config.event_period,
                limits_dir=config.limits_dir,
            )
            events.start()
            parts["events"] = events
        # A HelmRelease held for new values shows it only if we write it (docs/design.md).
        # Its values are shown only when the API server authenticates (docs/operations.md).
        # Reads before either are limited for the pod, as the receiver's calls are.
        attempts = DeniedAttempts(
            api,
            cluster.lookup,
            settings,
            flux,
            trust_reviews=bool(config.client_ca_file),
            limits_dir=config.limits_dir,
        )
        attempts.start()
        parts["attempts"] = attempts
        store = cluster
        store.start()
        flux.start()
        parts["sources"] = flux
        listing = flux
        where = "this webhook"
    if config.calendar_token_file:
        parts["calendar_token"] = hooks.TokenFile(config.calendar_token_file)
    if config.board:
        parts["board"] = read_only_board(store, listing, where, utcnow)
    return create_app(store, settings, **parts)


def app_factory(config: ServeConfig) -> Callable[[], Flask]:
    """What each worker calls for its app, once the master has read what it needs (UsageError)."""
    prepared = prepare(config)
    return lambda: build(prepared)
