"""``gate-admission``: serve the webhook, make certificates, run the gate controller."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from admission import __version__
from admission.cli.settings import add_policy_flags, policy_settings
from admission.cli.settings import csv as _csv, env as _env
from admission.clock import utcnow
from admission.kube.notifications import DEFAULT_ADDRESS as NOTIFY_ADDRESS
from admission.pki import certs
from admission.observability import logs


def _bool_env(flag: str) -> bool:
    return str(_env(flag, "")).lower() in ("1", "true", "yes")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the admission webhook server (TLS only)")
    p.add_argument("--port", type=int, default=int(_env("port", 9443)))
    p.add_argument("--address", default=_env("address", "0.0.0.0"), help="listen address (default 0.0.0.0)")
    p.add_argument("--cert-dir", default=_env("cert-dir", "certs"), help="holds tls.crt and tls.key")
    p.add_argument("--generate-certs", action="store_true", default=_bool_env("generate-certs"),
                   help="create a CA and serving certificate in --cert-dir when missing or due")
    p.add_argument("--service", default=_env("service", "gate-admission"), help="Service name, for certificate SANs")
    p.add_argument("--namespace", default=_env("namespace", "gate-admission-system"), help="Service namespace, for SANs")
    p.add_argument("--extra-sans", default=_env("extra-sans", ""), help="more certificate names or IPs, comma-separated")
    add_policy_flags(p)  # --mode, --exempt-users, --exempt-groups
    p.add_argument("--gates-dir", default=_env("gates-dir"), help="read Gates and GateKeepers from YAML files here")
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="cluster to read gates from (default: in-cluster)")
    p.add_argument("--receiver-token-file", default=_env("receiver-token-file"),
                   help="bearer token for POST /hooks/gates/...; the receiver is off without one")
    p.add_argument("--event-period", type=float, default=float(_env("event-period", 300)),
                   help="one Kubernetes Event per held object and message per this many seconds (0: no Events)")
    p.add_argument("--stale-after", type=float, default=float(_env("stale-after", 10)),
                   help="seconds without a working watch before gate state counts as unknown (cluster store)")
    p.add_argument("--calendar", action=argparse.BooleanOptionalAction, default=_env("calendar", "true") != "false",
                   help="serve GET /calendar.ics, every gate's closed intervals (default on)")
    p.add_argument("--workers", type=int, default=int(_env("workers", 2)))
    p.add_argument("--threads", type=int, default=int(_env("threads", 4)),
                   help="threads per worker; more only adds GIL contention to a CPU-bound server (bench/README.md)")
    p.add_argument("--shutdown-delay", type=float, default=float(_env("shutdown-delay", 5)),
                   help="on SIGTERM, keep serving this many seconds (with keep-alive off) before draining, "
                        "while the Pod's endpoint is removed")
    p.add_argument("--max-client-connections", type=_positive, default=_env("max-client-connections"),
                   help="connections one client address may hold open to each worker (default 256, and at most "
                        "half of a worker's connections); more are closed as they are accepted")
    p.add_argument("--log-level", default=_env("log-level", "info"))
    p.set_defaults(func=serve)


def _add_certs(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certs", help="create or renew the CA and serving certificate")
    p.add_argument("--service", default=_env("service", "gate-admission"))
    p.add_argument("--namespace", default=_env("namespace", "gate-admission-system"))
    p.add_argument("--extra-sans", default=_env("extra-sans", ""), help="more names or IPs, comma-separated")
    p.add_argument("--out", default=_env("cert-dir", "certs"), help="directory for ca.crt, tls.crt, tls.key")
    p.add_argument("--secret", default=_env("secret"),
                   help="keep them in Secrets NAME (kubernetes.io/tls) and NAME-ca in --namespace instead of --out")
    p.add_argument("--inject", action="store_true", help="write the CA bundle into both webhook configurations")
    p.add_argument("--webhook-config", default=_env("webhook-config", "gate-admission"),
                   help="name of the Validating/MutatingWebhookConfiguration to inject into")
    p.add_argument("--renew", action="store_true", help="issue a new serving certificate now (same CA)")
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="cluster for --secret and --inject")
    p.set_defaults(func=make_certs)


def _add_controller(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("controller", help="keep Gate status, record transitions, request reconciles")
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="cluster (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=_env("leader-elect", "true") != "false",
                   help="hold a Lease so that one replica acts (default on)")
    p.add_argument("--lease-namespace", default=_env("lease-namespace", "gate-admission-system"))
    p.add_argument("--lease-name", default=_env("lease-name", "gate-admission-controller"))
    p.add_argument("--identity", default=_env("identity", os.environ.get("POD_NAME") or socket.gethostname()))
    p.add_argument("--health-port", type=int, default=int(_env("health-port", 8081)),
                   help="plain-HTTP /healthz and /readyz for probes (0: off)")
    p.add_argument("--notify", action=argparse.BooleanOptionalAction, default=_bool_env("notify"),
                   help="send gate transitions and held/released Flux objects to Flux's notification-controller (default off)")
    p.add_argument("--notify-address", default=_env("notify-address", NOTIFY_ADDRESS),
                   help=f"notification-controller's event API (default {NOTIFY_ADDRESS})")
    p.add_argument("--notify-gates-address", default=_env("notify-gates-address"),
                   help="where gate transitions go (default: --notify-address; no Flux Alert can select a Gate)")
    p.add_argument("--notify-period", type=float, default=float(_env("notify-period", 300)),
                   help="one notification per object and message per this many seconds")
    p.add_argument("--log-level", default=_env("log-level", "info"))
    p.set_defaults(func=run_controller)


def _add_completion(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print the shell completion script for kubectl-gate and gate-admission")
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=print_completion)


def print_completion(args: argparse.Namespace) -> int:
    """argcomplete's script for both commands; `kubectl gate` completes through kubectl_complete-gate."""
    import argcomplete
    print(argcomplete.shellcode(["kubectl-gate", "gate-admission"], shell=args.shell))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gate-admission", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_certs(sub)
    _add_controller(sub)
    _add_completion(sub)
    return parser


def _cert_names(args: argparse.Namespace) -> list[str]:
    return certs.service_names(args.service, args.namespace) + sorted(_csv(args.extra_sans))


def make_certs(args: argparse.Namespace) -> int:
    now = utcnow()
    api = None
    if args.secret or args.inject:
        from admission.kube.client import api_client
        api = api_client(args.kubeconfig)
    if args.secret:
        from admission.kube.certs import sync_secrets
        ca_pem, why = sync_secrets(api, args.namespace, args.secret, _cert_names(args), now, force=args.renew)
        where = f"Secret {args.namespace}/{args.secret}"
    else:
        files, why = certs.ensure(args.out, _cert_names(args), now, force=args.renew)
        ca_pem, where = files.ca_cert.read_bytes(), str(files.cert)
    print(f"{'issued' if why else 'current'}: {where} ({why or 'valid, not due for renewal'})")
    if args.inject:
        from admission.kube.certs import inject
        changed = inject(api, ca_pem, args.webhook_config)
        print("caBundle: " + (", ".join(changed) if changed else "already current"))
    return 0


def _app_factory(args: argparse.Namespace):
    from admission.webhook.app import create_app
    settings = policy_settings(args)
    if args.receiver_token_file:
        if args.gates_dir:
            raise SystemExit("gate-admission: the receiver writes Gates in the cluster; it cannot be used with --gates-dir")
        from admission.webhook.receiver import TokenFile
        try:
            TokenFile(args.receiver_token_file)
        except (OSError, ValueError) as err:
            raise SystemExit(f"gate-admission: receiver token: {err}") from None

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
            from admission.kube.reflector import ClusterStore
            from admission.kube.gatewriter import cluster_patcher
            api = api_client(args.kubeconfig)
            store = ClusterStore(api, stale_after=args.stale_after)
            from admission.core.kinds import CACHED_KINDS
            from admission.kube.fluxcache import FluxCache
            # What each source serves, and HelmReleases: read by the hold points, per worker.
            sources = FluxCache(api, sorted(CACHED_KINDS), stale_after=args.stale_after)
            if args.receiver_token_file:
                from admission.webhook import receiver as hooks
                from admission.observability.metrics import RECEIVER
                receiver = hooks.blueprint(hooks.TokenFile(args.receiver_token_file), cluster_patcher(api),
                                           utcnow, record=lambda result: RECEIVER.labels(result).inc())
            if args.event_period > 0:
                from admission.kube.events import DenialEvents
                events = DenialEvents(api, period=args.event_period)
                events.start()
            from admission.kube.attempts import DeniedAttempts
            # A HelmRelease held for new values shows it only if we write it (docs/design.md).
            attempts = DeniedAttempts(api, store.lookup, settings, sources)
            attempts.start()
        store.start()
        sources.start()
        return create_app(store, settings, receiver=receiver, events=events, calendar=args.calendar,
                          sources=sources, attempts=attempts)

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

    files = certs.CertFiles(Path(args.cert_dir))
    if args.generate_certs:
        _, renewed = certs.ensure(args.cert_dir, _cert_names(args), utcnow())
        if renewed:
            print(f"gate-admission: wrote {files.cert} ({renewed}); CA bundle: {files.ca_cert}", file=sys.stderr)
    if not files.cert.exists() or not files.key.exists():
        print(f"gate-admission: no {files.cert} and {files.key}; TLS is required (use --generate-certs "
              f"or `gate-admission certs`)", file=sys.stderr)
        return 2
    logs.configure(args.log_level)  # the master's lines; workers inherit it
    options = server.options(address=args.address, port=args.port, certfile=str(files.cert), keyfile=str(files.key),
                             workers=args.workers, threads=args.threads, log_level=args.log_level,
                             shutdown_delay=args.shutdown_delay, max_client_connections=args.max_client_connections)
    server.Server(_app_factory(args), options).run()
    return 0


def run_controller(args: argparse.Namespace) -> int:
    import signal
    import threading

    from admission.kube.controller import Controller
    from admission.kube.health import serve_health
    from admission.kube.leader import LeaderElector
    from admission.kube.client import api_client

    logs.configure(args.log_level)
    api = api_client(args.kubeconfig)
    stop = threading.Event()
    fatal: list[str] = []

    def give_up(why: str) -> None:
        fatal.append(why)
        stop.set()

    elector = LeaderElector(api, args.lease_namespace, args.lease_name, args.identity,
                            on_fatal=give_up) if args.leader_elect else None
    notifier = None
    if args.notify:
        from admission.kube.notifications import FluxNotifier
        notifier = FluxNotifier(args.notify_address, args.notify_gates_address, instance=args.identity,
                                period=args.notify_period)
        notifier.start()
    controller = Controller(api, is_leader=elector.is_leader if elector else None, notifier=notifier)
    if args.health_port:
        serve_health(args.health_port, controller.readiness)
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


def main(argv: list[str] | None = None) -> int:
    import argcomplete
    parser = build_parser()
    argcomplete.autocomplete(parser, always_complete_options=False)  # only when the shell asks
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
