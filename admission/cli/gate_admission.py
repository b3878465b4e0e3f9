"""``gate-admission``: serve the webhook, make certificates, run the gate controller."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from admission import __version__
from admission.cli.admission_commands import make_certs, reselect, run_controller, serve
from admission.cli.parsing import parse, plain_help
from admission.cli.settings import add_policy_flags
from admission.cli.settings import env as _env
from admission.kube.health import LOOPBACK
from admission.kube.notifications import DEFAULT_ADDRESS as NOTIFY_ADDRESS

if TYPE_CHECKING:  # generic in typeshed only
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def _bool_env(flag: str) -> bool:
    return str(_env(flag, "")).lower() in ("1", "true", "yes")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _number(text: str) -> float:
    """A number (of seconds, mostly): a bad GATE_ADMISSION_* default is a usage error too, as
    argparse passes a string default through ``type``."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _log_level(text: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level ({', '.join(LOG_LEVELS)})")
    return text.lower()


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        # Kubernetes sets GATE_ADMISSION_PORT=tcp://IP:443 in Pods of a namespace that has a
        # Service named gate-admission, unless the Pod sets enableServiceLinks: false.
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number (from GATE_ADMISSION_PORT? a Service named gate-admission sets it "
            "to tcp://...: set enableServiceLinks: false on the Pod, or pass --port)"
        ) from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (1-65535)")
    return value


def _add_serve(sub: Subcommands) -> None:
    p = sub.add_parser("serve", help="run the admission webhook server (TLS only)")
    # A string default goes through `type` too, so a bad GATE_ADMISSION_PORT is a usage error.
    p.add_argument("--port", type=_port, default=str(_env("port", 9443)))
    p.add_argument("--address", default=_env("address", "0.0.0.0"), help="listen address (default 0.0.0.0)")
    p.add_argument("--cert-dir", default=_env("cert-dir", "certs"), help="holds tls.crt and tls.key")
    p.add_argument(
        "--generate-certs",
        action="store_true",
        default=_bool_env("generate-certs"),
        help="create a CA and serving certificate in --cert-dir when missing or due",
    )
    p.add_argument(
        "--service", default=_env("service", "gate-admission"), help="Service name, for certificate SANs"
    )
    p.add_argument(
        "--namespace", default=_env("namespace", "gate-admission-system"), help="Service namespace, for SANs"
    )
    p.add_argument(
        "--extra-sans", default=_env("extra-sans", ""), help="more certificate names or IPs, comma-separated"
    )
    p.add_argument(
        "--client-ca-file",
        default=_env("client-ca-file"),
        help="require a client certificate signed by this CA (the API server's, from its "
        "AdmissionConfiguration kubeconfig) on every path but /healthz, /readyz, /metrics, "
        "/calendar.ics, /board and the receiver; reloaded when it changes",
    )
    add_policy_flags(p)  # --mode, --exempt-users, --exempt-groups
    p.add_argument(
        "--gates-dir", default=_env("gates-dir"), help="read Gates and GateKeepers from YAML files here"
    )
    p.add_argument(
        "--kubeconfig", default=_env("kubeconfig"), help="cluster to read gates from (default: in-cluster)"
    )
    p.add_argument(
        "--receiver-token-file",
        default=_env("receiver-token-file"),
        help="the receiver's tokens (one bare token, or a YAML list of named, scoped tokens) for "
        "POST /hooks/gates/...; the receiver is off without one",
    )
    p.add_argument(
        "--approval-key-file",
        default=_env("approval-key-file"),
        help="the key approvals are sealed with (every replica the same; default with "
        "--generate-certs: approval.key in --cert-dir, made when missing); without one no "
        "approval is recorded or counts",
    )
    p.add_argument(
        "--event-period",
        type=_number,
        default=str(_env("event-period", 300)),
        help="one Kubernetes Event per held object and message per this many seconds (0: no Events)",
    )
    p.add_argument(
        "--stale-after",
        type=_number,
        default=str(_env("stale-after", 10)),
        help="seconds without a working watch before gate state counts as unknown (cluster store)",
    )
    p.add_argument(
        "--calendar",
        action=argparse.BooleanOptionalAction,
        default=_env("calendar", "true") != "false",
        help="serve GET /calendar.ics, every gate's closed intervals (default on)",
    )
    p.add_argument(
        "--calendar-wait",
        type=_number,
        default=str(_env("calendar-wait", 5)),
        help="seconds a calendar query with no feed yet waits for its first build before 503 "
        "(one request per worker at a time, every request for the default feed; 0: answer 503 at once)",
    )
    p.add_argument(
        "--calendar-token-file",
        default=_env("calendar-token-file"),
        help="GET /calendar.ics requires this token (bearer, or basic auth's password; checked in "
        "constant time): for spoke clusters that follow this one's gates. Default: no token",
    )
    p.add_argument(
        "--board",
        action=argparse.BooleanOptionalAction,
        default=_bool_env("board"),
        help="serve the gate board read-only at /board, for a team screen: what the webhook "
        "decides with, to the callers /calendar.ics answers (its token, if any). Default off",
    )
    # Strings through `type`, so that a bad GATE_ADMISSION_WORKERS is a usage error too.
    p.add_argument("--workers", type=_positive, default=str(_env("workers", 2)), help="worker processes")
    p.add_argument(
        "--threads",
        type=_positive,
        default=str(_env("threads", 4)),
        help="threads per worker; more only adds GIL contention to a CPU-bound server (bench/README.md)",
    )
    p.add_argument(
        "--shutdown-delay",
        type=_number,
        default=str(_env("shutdown-delay", 5)),
        help="on SIGTERM, keep serving this many seconds (with keep-alive off) before draining, "
        "while the Pod's endpoint is removed",
    )
    p.add_argument(
        "--max-client-connections",
        type=_positive,
        default=_env("max-client-connections"),
        help="connections one client address may hold open to each worker (default 256, and at most "
        "half of a worker's connections); more are closed as they are accepted",
    )
    p.add_argument(
        "--log-level", type=_log_level, default=_env("log-level", "info"), help=", ".join(LOG_LEVELS)
    )
    p.set_defaults(func=serve)


def _add_certs(sub: Subcommands) -> None:
    p = sub.add_parser("certs", help="create or renew the CA and serving certificate")
    p.add_argument("--service", default=_env("service", "gate-admission"))
    p.add_argument("--namespace", default=_env("namespace", "gate-admission-system"))
    p.add_argument("--extra-sans", default=_env("extra-sans", ""), help="more names or IPs, comma-separated")
    p.add_argument("--out", default=_env("cert-dir", "certs"), help="directory for ca.crt, tls.crt, tls.key")
    p.add_argument(
        "--secret",
        default=_env("secret"),
        help="keep them in Secrets NAME (kubernetes.io/tls) and NAME-ca in --namespace instead of --out",
    )
    p.add_argument(
        "--inject", action="store_true", help="write the CA bundle into both webhook configurations"
    )
    p.add_argument(
        "--webhook-config",
        default=_env("webhook-config", "gate-admission"),
        help="name of the Validating/MutatingWebhookConfiguration to inject into",
    )
    p.add_argument("--renew", action="store_true", help="issue a new serving certificate now (same CA)")
    p.add_argument(
        "--client-cert",
        metavar="NAME",
        default=_env("client-cert"),
        help="also issue client.crt and client.key for NAME, signed by the CA in --out: the "
        "certificate the API server presents to `serve --client-ca-file`",
    )
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="cluster for --secret and --inject")
    p.add_argument(
        "--approval-key-secret",
        default=_env("approval-key-secret"),
        help="also create Secret NAME in --namespace holding the key approvals are sealed with, "
        "when it does not exist (never replaced)",
    )
    p.set_defaults(func=make_certs)


def _deployment_selector(text: str) -> tuple[str, dict[str, str]]:
    name, sep, labels = text.partition(":")
    pairs = [p.partition("=") for p in labels.split(",")] if labels else []
    if not (name and sep and pairs and all(k and eq for k, eq, _ in pairs)):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:KEY=VALUE[,KEY=VALUE...]")
    return name, {k: v for k, _, v in pairs}


def _add_reselect(sub: Subcommands) -> None:
    p = sub.add_parser(
        "reselect",
        help="before an upgrade that widens Deployments' selectors: label their Pods and "
        "ReplicaSets and orphan them, for the new Deployments to adopt",
    )
    p.add_argument("--namespace", default=_env("namespace", "gate-admission-system"))
    p.add_argument(
        "--deployment",
        type=_deployment_selector,
        action="append",
        required=True,
        metavar="NAME:KEY=VALUE,...",
        help="a Deployment and the selector it will have (repeat for each)",
    )
    p.add_argument("--kubeconfig", default=_env("kubeconfig"), help="cluster (default: in-cluster)")
    p.set_defaults(func=reselect)


def _add_controller(sub: Subcommands) -> None:
    p = sub.add_parser("controller", help="keep Gate status, record transitions, request reconciles")
    p.add_argument(
        "--kubeconfig", default=_env("kubeconfig"), help="cluster (default: in-cluster, then ~/.kube/config)"
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=_env("leader-elect", "true") != "false",
        help="hold a Lease so that one replica acts (default on)",
    )
    p.add_argument(
        "--approval-key-file",
        default=_env("approval-key-file"),
        help="the webhook's approval key, to verify approvals with; without it none is shown as "
        "verified, announced or ended as used",
    )
    p.add_argument("--lease-namespace", default=_env("lease-namespace", "gate-admission-system"))
    p.add_argument("--lease-name", default=_env("lease-name", "gate-admission-controller"))
    p.add_argument("--identity", default=_env("identity", os.environ.get("POD_NAME") or socket.gethostname()))
    p.add_argument(
        "--health-port",
        type=_whole,
        default=str(_env("health-port", 8081)),
        help="plain-HTTP /healthz and /readyz for probes, and /metrics for Prometheus (0: off)",
    )
    p.add_argument(
        "--health-address",
        default=_env("health-address", LOOPBACK),
        help=f"address --health-port listens on (default {LOOPBACK}: this host only; the Deployment "
        "passes the Pod IP, where the kubelet probes)",
    )
    p.add_argument(
        "--notify",
        action=argparse.BooleanOptionalAction,
        default=_bool_env("notify"),
        help="send gate transitions and held/released Flux objects to Flux's notification-controller (default off)",
    )
    p.add_argument(
        "--notify-address",
        default=_env("notify-address", NOTIFY_ADDRESS),
        help=f"notification-controller's event API (default {NOTIFY_ADDRESS})",
    )
    p.add_argument(
        "--notify-gates-address",
        default=_env("notify-gates-address"),
        help="where gate transitions go (default: --notify-address; no Flux Alert can select a Gate)",
    )
    p.add_argument(
        "--notify-period",
        type=_number,
        default=str(_env("notify-period", 300)),
        help="one notification per object and message per this many seconds",
    )
    p.add_argument(
        "--calendar-allow-networks",
        default=_env("calendar-allow-networks", ""),
        help="GateKeeper calendars may be fetched from these non-public networks (CIDRs, comma-separated; "
        "default none: loopback, private and link-local addresses are refused)",
    )
    p.add_argument(
        "--calendar-min-interval",
        default=_env("calendar-min-interval", "30s"),
        help="no calendar is fetched more often than this (Go duration; default 30s)",
    )
    p.add_argument(
        "--calendar-max-bytes",
        type=_whole,
        default=str(_env("calendar-max-bytes", 4 << 20)),
        help="largest calendar feed accepted, in bytes (default 4 MiB)",
    )
    p.add_argument(
        "--calendar-timeout",
        type=_number,
        default=str(_env("calendar-timeout", 30)),
        help="seconds one calendar fetch may take in all: DNS, connect, TLS, headers and body (default 30)",
    )
    p.add_argument(
        "--log-level", type=_log_level, default=_env("log-level", "info"), help=", ".join(LOG_LEVELS)
    )
    p.set_defaults(func=run_controller)


def _add_completion(sub: Subcommands) -> None:
    p = sub.add_parser(
        "completion", help="print the shell completion script for kubectl-gate and gate-admission"
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=print_completion)


def _add_install_flux_plugin(sub: Subcommands) -> None:
    p = sub.add_parser(
        "install-flux-plugin",
        help="make `flux gate` run kubectl-gate's commands: link flux-gate into flux's plugin directory",
    )
    p.add_argument(
        "--dir", help="plugin directory (default: $FLUXCD_PLUGINS, else ~/.fluxcd/plugins, where flux looks)"
    )
    p.add_argument("--force", action="store_true", help="replace a flux-gate there that is not a link")
    p.set_defaults(func=install_flux_plugin)


def install_flux_plugin(args: argparse.Namespace) -> int:
    from admission.cli import flux_gate

    command = flux_gate.installed_command()
    if command is None:
        print(
            f"gate-admission: no {flux_gate.PLUGIN} command installed next to this one or on PATH",
            file=sys.stderr,
        )
        return 1
    directory = Path(args.dir) if args.dir else flux_gate.plugin_dir()
    try:
        print(flux_gate.install(directory, command, force=args.force))
    except (flux_gate.InstallError, OSError) as err:
        print(f"gate-admission: {err}", file=sys.stderr)
        return 1
    return 0


def print_completion(args: argparse.Namespace) -> int:
    """argcomplete's script for both commands; `kubectl gate` completes through kubectl_complete-gate."""
    from argcomplete.shell_integration import shellcode

    print(shellcode(["kubectl-gate", "gate-admission"], shell=args.shell))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gate-admission", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_certs(sub)
    _add_controller(sub)
    _add_reselect(sub)
    _add_completion(sub)
    _add_install_flux_plugin(sub)
    return plain_help(parser)


def main(argv: list[str] | None = None) -> int:
    import argcomplete

    parser = build_parser()
    argcomplete.autocomplete(parser, always_complete_options=False)  # only when the shell asks
    args = parse(parser, sys.argv[1:] if argv is None else argv)
    command: Callable[[argparse.Namespace], int] = args.func
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
