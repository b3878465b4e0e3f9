"""What ``gate-admission``'s commands do: serve the webhook, make certificates, run the gate controller."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from kubernetes.client import ApiClient
from kubernetes.config import ConfigException

from admission.cli.config import UsageError, approval_key, cert_names, controller_config, serve_config
from admission.clock import utcnow
from admission.kube.certs import ensure_approval_key, inject, sync_secrets
from admission.kube.client import CALL_ERRORS, api_client, describe_error
from admission.kube.health import serve_health
from admission.kube.notifications import FluxNotifier
from admission.kube.reselect import ReselectError
from admission.kube.reselect import reselect as reselect_one
from admission.observability import logs
from admission.pki import certs

log = logging.getLogger("admission.serve")


def _cert_names(args: argparse.Namespace) -> list[str]:
    return cert_names(args.service, args.namespace, args.extra_sans)


def _cluster(kubeconfig: str | None, command: str) -> ApiClient:
    """The API client for --kubeconfig (else in-cluster, else ~/.kube/config), or SystemExit(2)
    with one line that says none was found and what to pass instead."""
    try:
        return api_client(kubeconfig)
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
        api = _cluster(args.kubeconfig, "certs")
    if args.secret:
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
        changed = inject(api, ca_pem, args.webhook_config)
        print("caBundle: " + (", ".join(changed) if changed else "already current"))
    if getattr(args, "approval_key_secret", None):
        made = ensure_approval_key(api, args.namespace, args.approval_key_secret)
        print(
            f"{'created' if made else 'current'}: Secret {args.namespace}/{args.approval_key_secret} (approval key)"
        )
    return 0


def serve(args: argparse.Namespace) -> int:
    try:
        config = serve_config(args)  # a bad combination exits before anything starts
    except UsageError as err:
        logs.configure(args.log_level)
        log.error(str(err))
        return 2
    # Before prometheus_client is imported anywhere: the workers forked later must count into
    # shared files, or a scrape would show only the worker that answers it.
    shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if shared:  # counts from an earlier run must not carry over
        for stale in Path(shared).glob("*.db"):
            stale.unlink()
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gate-admission-metrics-")
    # Only now: both import the metrics (admission.cli.wiring says why).
    from admission.cli import wiring
    from admission.webhook import server

    logs.configure(config.log_level)  # the master's lines, from the first one, are JSON; workers inherit it
    if config.gates_dir and not os.path.isdir(config.gates_dir):
        # A mistyped path would serve "gate not found" (closed) for every gate, with the server Ready.
        log.error(f"--gates-dir {config.gates_dir}: not a directory")
        return 2
    if config.in_cluster:
        _cluster(config.kubeconfig, "serve")  # said once here, not as a traceback per worker
    files = config.cert_files
    if config.generate_certs:
        try:
            _, renewed = certs.ensure(config.cert_dir, list(config.cert_names), utcnow())
        except OSError as err:
            log.error(f"--cert-dir {config.cert_dir}: cannot write certificates: {err.strerror or err}")
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
    if config.client_ca_file:
        try:
            ssl.create_default_context(cafile=config.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            log.error(f"--client-ca-file {config.client_ca_file}: {err}")
            return 2
    if config.receiver_token_file or config.in_cluster:
        # Limits for the pod, in files the workers forked below share: the receiver's calls, and
        # the reads before denial Events and shown attempts (the cluster store only).
        limits_dir = tempfile.mkdtemp(prefix="gate-admission-limits-")
        config = replace(config, limits_dir=limits_dir)
        master = os.getpid()  # workers exit through atexit too: only the master removes it

        def remove_limits() -> None:
            if os.getpid() == master:
                shutil.rmtree(limits_dir, ignore_errors=True)

        atexit.register(remove_limits)
    try:
        factory = wiring.app_factory(config)
    except UsageError as err:
        log.error(str(err))
        return 2
    options = server.options(
        address=config.address,
        port=config.port,
        certfile=str(files.cert),
        keyfile=str(files.key),
        workers=config.workers,
        threads=config.threads,
        log_level=config.log_level,
        shutdown_delay=config.shutdown_delay,
        client_ca=config.client_ca_file,
        max_client_connections=config.max_client_connections,
    )
    server.Server(factory, options).run()
    return 0


def run_controller(args: argparse.Namespace) -> int:
    # Here, not at the top: they import the metrics, which `serve` must first point at shared files.
    from admission.kube.controller import Controller
    from admission.kube.leader import LeaderElector

    try:
        config = controller_config(args)  # a bad flag exits before anything starts
        logs.configure(config.log_level)
        key = approval_key(config.approval_key_file)
    except UsageError as err:
        logs.configure(args.log_level)
        log.error(str(err))
        return 2
    api = _cluster(config.kubeconfig, "controller")
    stop = threading.Event()
    fatal: list[str] = []

    def give_up(why: str) -> None:
        fatal.append(why)
        stop.set()

    elector = (
        LeaderElector(api, config.lease_namespace, config.lease_name, config.identity, on_fatal=give_up)
        if config.leader_elect
        else None
    )
    notifier = None
    if config.notify:
        notifier = FluxNotifier(
            config.notify_address,
            config.notify_gates_address,
            instance=config.identity,
            period=config.notify_period,
        )
    controller = Controller(
        api,
        is_leader=elector.is_leader if elector else None,
        notifier=notifier,
        calendars={"policy": config.calendar_policy, "min_interval": config.calendar_min_interval},
        approval_key=key,
    )
    if config.health_port:
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
                config.health_port,
                controller.readiness,
                config.health_address,
                metrics=lambda: exposition(scraped),
            )
        except OSError as err:  # before anything is started: nothing to stop
            print(
                f"gate-admission controller: cannot listen on --health-address {config.health_address} "
                f"port {config.health_port}: {err}",
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
    api = _cluster(args.kubeconfig, "reselect")
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
