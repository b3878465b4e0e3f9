"""What ``gate-admission``'s commands do: serve the webhook, make certificates, run the gate controller."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from admission.cli.settings import csv as _csv
from admission.cli.settings import policy_settings
from admission.clock import utcnow
from admission.observability import logs
from admission.pki import certs

log = logging.getLogger("admission.serve")


def _cert_names(args: argparse.Namespace) -> list[str]:
    return certs.service_names(args.service, args.namespace) + sorted(_csv(args.extra_sans))


def _cluster(args: argparse.Namespace, command: str) -> Any:
    """The API client for --kubeconfig (else in-cluster, else ~/.kube/config), or SystemExit(2)
    with one line that says none was found and what to pass instead."""
    from kubernetes.config import ConfigException

    from admission.kube.client import api_client

    try:
        return api_client(args.kubeconfig)
    except (ConfigException, OSError, ValueError) as err:
        why = f"no cluster: {' '.join(str(err).split())}; pass --kubeconfig"
        if command == "serve":  # a JSON line, as every line the server writes
            log.error(f"{why} (or --gates-dir DIR to read gates from files), or run in a Pod")
        else:
            print(f"gate-admission {command}: {why}, or run in a Pod", file=sys.stderr)
        raise SystemExit(2) from None


def make_certs(args: argparse.Namespace) -> int:
    try:
        if not (args.secret or args.inject or getattr(args, "approval_key_secret", None)):
            return _make_certs(args)
        from admission.kube.client import CALL_ERRORS, describe_error

        try:
            return _make_certs(args)
        except CALL_ERRORS as err:
            # A Job's log line, not a traceback: the Job retries (backoffLimit), and whoever reads
            # `kubectl logs` sees why each try failed.
            print(f"gate-admission certs: the API server call failed: {describe_error(err)}", file=sys.stderr)
            return 1
    except OSError as err:  # --out (or --client-cert's files) cannot be written
        where = f" {err.filename}" if err.filename else ""
        print(f"gate-admission certs: cannot write{where}: {err.strerror or err}", file=sys.stderr)
        return 1


def _make_certs(args: argparse.Namespace) -> int:
    now = utcnow()
    api = None
    if args.secret or args.inject or getattr(args, "approval_key_secret", None):
        api = _cluster(args, "certs")
    if args.secret:
        from admission.kube.certs import sync_secrets

        ca_pem, why = sync_secrets(api, args.namespace, args.secret, _cert_names(args), now, force=args.renew)
        where = f"Secret {args.namespace}/{args.secret}"
    else:
        files, why = certs.ensure(args.out, _cert_names(args), now, force=args.renew)
        ca_pem, where = files.ca_cert.read_bytes(), str(files.cert)
    print(f"{'issued' if why else 'current'}: {where} ({why or 'valid, not due for renewal'})")
    if args.client_cert:
        if args.secret:
            raise SystemExit(
                "gate-admission certs: --client-cert writes files; use it with --out, not --secret"
            )
        client_cert, _ = certs.issue_client(args.out, args.client_cert, now)
        print(f"issued: {client_cert} (client certificate for {args.client_cert!r})")
    if args.inject:
        from admission.kube.certs import inject

        changed = inject(api, ca_pem, args.webhook_config)
        print("caBundle: " + (", ".join(changed) if changed else "already current"))
    if getattr(args, "approval_key_secret", None):
        from admission.kube.certs import ensure_approval_key

        made = ensure_approval_key(api, args.namespace, args.approval_key_secret)
        print(
            f"{'created' if made else 'current'}: Secret {args.namespace}/{args.approval_key_secret} (approval key)"
        )
    return 0


def approval_key(args: argparse.Namespace, cert_dir: str | None = None) -> bytes | None:
    """The key approvals are sealed with: --approval-key-file, else (``cert_dir``: serve
    --generate-certs) approval.key there, made when missing; None (logged) when there is none."""
    from admission.pki import approvalkey

    path = getattr(args, "approval_key_file", None)
    try:
        if path:
            return approvalkey.read(path)
        if cert_dir is not None:
            return approvalkey.ensure(Path(cert_dir) / approvalkey.FILE_NAME)[0]
    except (OSError, ValueError) as err:
        log.error(f"approval key: {err}")
        raise SystemExit(2) from None
    log.warning("no --approval-key-file: approvals are not recorded, and none counts")
    return None


def _app_factory(args: argparse.Namespace):
    from admission.webhook.app import create_app

    # A gates directory is written by whoever may write its files: no approval there is sealed.
    key = None if args.gates_dir else approval_key(args, args.cert_dir if args.generate_certs else None)
    settings = replace(policy_settings(args), approval_key=key)
    if args.receiver_token_file:
        if args.gates_dir:
            log.error("the receiver writes Gates in the cluster; it cannot be used with --gates-dir")
            raise SystemExit(2)
        from admission.webhook.receiver import ReceiverTokens

        try:
            ReceiverTokens(args.receiver_token_file)
        except (OSError, ValueError) as err:
            log.error(f"receiver token: {err}")
            raise SystemExit(2) from None
    if args.calendar_token_file:
        from admission.webhook.receiver import TokenFile

        try:
            TokenFile(args.calendar_token_file)
        except (OSError, ValueError) as err:
            log.error(f"calendar token: {err}")
            raise SystemExit(2) from None

    def factory():
        logs.configure(args.log_level)
        receiver = events = attempts = None
        if args.gates_dir:
            from admission.store import StaticSources
            from admission.store.files import FileStore

            store = FileStore(args.gates_dir)
            sources = StaticSources()  # no cluster, no Flux objects (docs/design.md, "Hold points")
        else:
            from admission.kube.client import api_client
            from admission.kube.gatewriter import cluster_patcher
            from admission.kube.reflector import ClusterStore

            api = api_client(args.kubeconfig)
            store = ClusterStore(api, stale_after=args.stale_after, approval_key=key)
            from admission.core.flux.kinds import CACHED_KINDS
            from admission.kube.fluxcache import FluxCache

            # What each source serves, and HelmReleases: read by the hold points, per worker.
            sources = FluxCache(api, sorted(CACHED_KINDS), stale_after=args.stale_after)
            if args.receiver_token_file:
                from admission.observability.metrics import RECEIVER
                from admission.webhook import receiver as hooks

                # Rate limits in files every worker maps: one limit for the pod, not one per worker.
                receiver = hooks.blueprint(
                    hooks.ReceiverTokens(args.receiver_token_file),
                    cluster_patcher(api),
                    utcnow,
                    record=lambda result: RECEIVER.labels(result).inc(),
                    limits_dir=getattr(args, "limits_dir", None),
                )
            if args.event_period > 0:
                from admission.kube.events import DenialEvents

                events = DenialEvents(
                    api,
                    store.lookup,
                    settings,
                    sources,
                    period=args.event_period,
                    limits_dir=getattr(args, "limits_dir", None),
                )
                events.start()
            from admission.kube.attempts import DeniedAttempts

            # A HelmRelease held for new values shows it only if we write it (docs/design.md).
            # Its values are shown only when the API server authenticates (docs/operations.md).
            # Reads before either are limited for the pod, as the receiver's calls are.
            attempts = DeniedAttempts(
                api,
                store.lookup,
                settings,
                sources,
                trust_reviews=bool(args.client_ca_file),
                limits_dir=getattr(args, "limits_dir", None),
            )
            attempts.start()
        store.start()
        sources.start()
        calendar_token = None
        if args.calendar_token_file:
            from admission.webhook.receiver import TokenFile

            calendar_token = TokenFile(args.calendar_token_file)
        board = None
        if args.board:
            from admission.cli.boardmount import board as read_only_board

            where = f"gate-admission serve --gates-dir {args.gates_dir}" if args.gates_dir else "this webhook"
            board = read_only_board(store, None if args.gates_dir else sources, where, utcnow)
        return create_app(
            store,
            settings,
            receiver=receiver,
            events=events,
            calendar=args.calendar,
            calendar_wait=args.calendar_wait,
            calendar_token=calendar_token,
            sources=sources,
            attempts=attempts,
            board=board,
            certfile=str(certs.CertFiles(Path(args.cert_dir)).cert),
        )

    return factory


def serve(args: argparse.Namespace) -> int:
    # Before prometheus_client is imported anywhere: the workers forked later must count into
    # shared files, or a scrape would show only the worker that answers it.
    shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if shared:  # counts from an earlier run must not carry over
        for stale in Path(shared).glob("*.db"):
            stale.unlink()
    else:
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gate-admission-metrics-")
    from admission.webhook import server

    logs.configure(args.log_level)  # the master's lines, from the first one, are JSON; workers inherit it
    if args.gates_dir and not os.path.isdir(args.gates_dir):
        # A mistyped path would serve "gate not found" (closed) for every gate, with the server Ready.
        log.error(f"--gates-dir {args.gates_dir}: not a directory")
        return 2
    if not args.gates_dir:
        _cluster(args, "serve")  # said once here, not as a traceback per worker
    files = certs.CertFiles(Path(args.cert_dir))
    if args.generate_certs:
        try:
            _, renewed = certs.ensure(args.cert_dir, _cert_names(args), utcnow())
        except OSError as err:
            log.error(f"--cert-dir {args.cert_dir}: cannot write certificates: {err.strerror or err}")
            return 2
        if renewed:
            log.info(
                "serving certificate written",
                extra={"certfile": str(files.cert), "why": renewed, "caBundle": str(files.ca_cert)},
            )
    if not files.cert.exists() or not files.key.exists():
        log.error(
            f"no {files.cert} and {files.key}; TLS is required (use --generate-certs or `gate-admission certs`)"
        )
        return 2
    if args.client_ca_file:
        try:
            ssl.create_default_context(cafile=args.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            log.error(f"--client-ca-file {args.client_ca_file}: {err}")
            return 2
    if args.receiver_token_file or not args.gates_dir:
        # Limits for the pod, in files the workers forked below share: the receiver's calls, and
        # the reads before denial Events and shown attempts (the cluster store only).
        import atexit
        import shutil
        import tempfile

        args.limits_dir = tempfile.mkdtemp(prefix="gate-admission-limits-")
        master = os.getpid()  # workers exit through atexit too: only the master removes it

        def remove_limits() -> None:
            if os.getpid() == master:
                shutil.rmtree(args.limits_dir, ignore_errors=True)

        atexit.register(remove_limits)
    factory = _app_factory(args)
    options = server.options(
        address=args.address,
        port=args.port,
        certfile=str(files.cert),
        keyfile=str(files.key),
        workers=args.workers,
        threads=args.threads,
        log_level=args.log_level,
        shutdown_delay=args.shutdown_delay,
        client_ca=args.client_ca_file,
        max_client_connections=args.max_client_connections,
    )
    server.Server(factory, options).run()
    return 0


def calendar_options(args: argparse.Namespace) -> dict:
    """CalendarSync's options from the controller's --calendar-* flags; exit on a bad one."""
    from admission.core.base.timefmt import parse_duration
    from admission.ical.fetch import Policy, parse_networks

    try:
        networks = parse_networks(args.calendar_allow_networks)
        min_interval = parse_duration(args.calendar_min_interval)
    except ValueError as err:
        raise SystemExit(f"gate-admission controller: {err}") from None
    if args.calendar_max_bytes <= 0 or args.calendar_timeout <= 0:
        raise SystemExit(
            "gate-admission controller: --calendar-max-bytes and --calendar-timeout must be positive"
        )
    policy = Policy(
        max_bytes=args.calendar_max_bytes,
        total_timeout=args.calendar_timeout,
        connect_timeout=min(5.0, args.calendar_timeout),
        allowed_networks=networks,
    )
    return {"policy": policy, "min_interval": min_interval}


def run_controller(args: argparse.Namespace) -> int:
    import signal
    import threading

    from admission.kube.controller import Controller
    from admission.kube.health import serve_health
    from admission.kube.leader import LeaderElector

    logs.configure(args.log_level)
    calendars = calendar_options(args)  # a bad flag exits before anything starts
    api = _cluster(args, "controller")
    stop = threading.Event()
    fatal: list[str] = []

    def give_up(why: str) -> None:
        fatal.append(why)
        stop.set()

    elector = (
        LeaderElector(api, args.lease_namespace, args.lease_name, args.identity, on_fatal=give_up)
        if args.leader_elect
        else None
    )
    notifier = None
    if args.notify:
        from admission.kube.notifications import FluxNotifier

        notifier = FluxNotifier(
            args.notify_address, args.notify_gates_address, instance=args.identity, period=args.notify_period
        )
    key = approval_key(args)
    controller = Controller(
        api,
        is_leader=elector.is_leader if elector else None,
        notifier=notifier,
        calendars=calendars,
        approval_key=key,
    )
    if args.health_port:
        from admission.kube.scrape import collector
        from admission.observability.controllermetrics import exposition

        scraped = collector(
            controller.store,
            elector.is_leader.is_set if elector else lambda: True,
            utcnow,
            (lambda: dict(notifier.results)) if notifier else None,
        )
        try:
            serve_health(
                args.health_port,
                controller.readiness,
                args.health_address,
                metrics=lambda: exposition(scraped),
            )
        except OSError as err:  # before anything is started: nothing to stop
            print(
                f"gate-admission controller: cannot listen on --health-address {args.health_address} "
                f"port {args.health_port}: {err}",
                file=sys.stderr,
            )
            return 2
    if notifier:
        notifier.start()
    if elector:
        elector.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    worker = threading.Thread(target=controller.run, name="controller", daemon=True)
    worker.start()
    stop.wait()
    controller.stop()
    if notifier:
        notifier.stop()
    if elector:
        elector.stop()
    if fatal:
        print(f"gate-admission controller: {fatal[0]}", file=sys.stderr)
        return 1
    return 0


def reselect(args: argparse.Namespace) -> int:
    """`gate-admission reselect`: the chart's pre-upgrade hook (admission.kube.reselect)."""
    from admission.kube.client import CALL_ERRORS, describe_error
    from admission.kube.reselect import ReselectError
    from admission.kube.reselect import reselect as reselect_one

    api = _cluster(args, "reselect")
    for name, labels in args.deployment:
        try:
            print(f"gate-admission reselect: {reselect_one(api, args.namespace, name, labels)}")
        except ReselectError as err:
            print(f"gate-admission reselect: {err}", file=sys.stderr)
            return 1
        except CALL_ERRORS as err:
            print(
                f"gate-admission reselect: the API server call failed: {describe_error(err)}", file=sys.stderr
            )
            return 1
    return 0
