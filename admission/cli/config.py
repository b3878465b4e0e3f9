"""`gate-admission serve`'s and `controller`'s configurations: their flags, each defaulting to its
GATE_ADMISSION_* variable (`admission.cli.gate_admission` parses them), read once into one frozen
value each; the server's parts are built from it by the wiring (`admission.cli.wiring`). What no
flag's type can see alone (a combination, a value outside a flag's choices that came from the
environment, a network or a duration) is refused here, before anything starts."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from admission.cli.settings import csv, policy_settings
from admission.core.admission.decision import Settings
from admission.core.base import names
from admission.core.base.timefmt import parse_duration
from admission.ical.fetch import Policy, parse_networks
from admission.pki import approvalkey, certs

log = logging.getLogger("admission.serve")


class UsageError(ValueError):
    """A configuration that cannot be served: said in one line, exit code 2."""


@dataclass(frozen=True)
class ServeConfig:
    address: str
    port: int
    cert_dir: Path
    generate_certs: bool
    cert_names: tuple[str, ...]  # the serving certificate's: the Service's names and --extra-sans
    client_ca_file: str | None
    settings: Settings  # the policy flags; the approval key is read later (`admission.cli.wiring`)
    gates_dir: str | None
    kubeconfig: str | None
    receiver_token_file: str | None
    approval_key_file: str | None
    event_period: float
    stale_after: float
    calendar: bool
    calendar_wait: float
    calendar_token_file: str | None
    board: bool
    workers: int
    threads: int
    shutdown_delay: float
    max_client_connections: int | None
    log_level: str
    # The pod's rate limits, in files every worker maps: made by `serve` before the workers fork.
    limits_dir: str | None = None

    @property
    def cert_files(self) -> certs.CertFiles:
        return certs.CertFiles(self.cert_dir)

    @property
    def in_cluster(self) -> bool:
        """Gates from the API server (not from --gates-dir's files)."""
        return not self.gates_dir


def cert_names(service: str, namespace: str, extra_sans: str | None) -> list[str]:
    """The serving certificate's names: the Service's, then --extra-sans in order."""
    return certs.service_names(service, namespace) + sorted(csv(extra_sans))


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """`serve`'s parsed flags as its configuration, or UsageError."""
    settings = policy_settings(args)
    if settings.mode not in names.MODES:
        # Only GATE_ADMISSION_MODE gets here (argparse checks --mode's choices, not its default);
        # any mode but enforce lets a held change through, so a misspelt one must not start.
        raise UsageError(
            f"GATE_ADMISSION_MODE {settings.mode!r} is not a mode (one of {', '.join(names.MODES)})"
        )
    if args.receiver_token_file and args.gates_dir:
        raise UsageError("the receiver writes Gates in the cluster; it cannot be used with --gates-dir")
    return ServeConfig(
        address=args.address,
        port=args.port,
        cert_dir=Path(args.cert_dir),
        generate_certs=args.generate_certs,
        cert_names=tuple(cert_names(args.service, args.namespace, args.extra_sans)),
        client_ca_file=args.client_ca_file,
        settings=settings,
        gates_dir=args.gates_dir,
        kubeconfig=args.kubeconfig,
        receiver_token_file=args.receiver_token_file,
        approval_key_file=args.approval_key_file,
        event_period=args.event_period,
        stale_after=args.stale_after,
        calendar=args.calendar,
        calendar_wait=args.calendar_wait,
        calendar_token_file=args.calendar_token_file,
        board=args.board,
        workers=args.workers,
        threads=args.threads,
        shutdown_delay=args.shutdown_delay,
        max_client_connections=args.max_client_connections,
        log_level=args.log_level,
    )


@dataclass(frozen=True)
class ControllerConfig:
    kubeconfig: str | None
    identity: str  # the Lease holder's name, and the notifications' instance
    leader_elect: bool
    lease_namespace: str
    lease_name: str
    approval_key_file: str | None
    health_port: int  # 0: no health or metrics endpoint
    health_address: str
    notify: bool
    notify_address: str
    notify_gates_address: str | None
    notify_period: float
    calendar_policy: Policy  # what one GateKeeper calendar fetch may cost and reach
    calendar_min_interval: timedelta
    log_level: str


def controller_config(args: argparse.Namespace) -> ControllerConfig:
    """`controller`'s parsed flags as its configuration, or UsageError."""
    try:
        networks = parse_networks(args.calendar_allow_networks)
        min_interval = parse_duration(args.calendar_min_interval)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.calendar_max_bytes <= 0 or args.calendar_timeout <= 0:
        raise UsageError("--calendar-max-bytes and --calendar-timeout must be positive")
    return ControllerConfig(
        kubeconfig=args.kubeconfig,
        identity=args.identity,
        leader_elect=args.leader_elect,
        lease_namespace=args.lease_namespace,
        lease_name=args.lease_name,
        approval_key_file=args.approval_key_file,
        health_port=args.health_port,
        health_address=args.health_address,
        notify=args.notify,
        notify_address=args.notify_address,
        notify_gates_address=args.notify_gates_address,
        notify_period=args.notify_period,
        calendar_policy=Policy(
            max_bytes=args.calendar_max_bytes,
            total_timeout=args.calendar_timeout,
            connect_timeout=min(5.0, args.calendar_timeout),
            allowed_networks=networks,
        ),
        calendar_min_interval=min_interval,
        log_level=args.log_level,
    )


def approval_key(path: str | None, cert_dir: Path | None = None) -> bytes | None:
    """The key approvals are sealed with: the file at ``path``, else (``cert_dir``: serve
    --generate-certs) approval.key there, made when missing; None (logged) when there is none.
    UsageError when it cannot be read or made."""
    try:
        if path:
            return approvalkey.read(path)
        if cert_dir is not None:
            return approvalkey.ensure(cert_dir / approvalkey.FILE_NAME)[0]
    except (OSError, ValueError) as err:
        raise UsageError(f"approval key: {err}") from None
    log.warning("no --approval-key-file: approvals are not recorded, and none counts")
    return None
