"""The server's policy flags (mode, exempt users and groups), shared by `gate-admission serve`
and `kubectl gate check` so that both read the same GATE_ADMISSION_* variables the same way."""

from __future__ import annotations

import argparse
import os
from typing import TypeVar, cast, overload

from admission.core.admission.decision import Settings
from admission.core.base import names

ENV_PREFIX = "GATE_ADMISSION_"

T = TypeVar("T")


@overload
def env(flag: str) -> str | None: ...
@overload
def env(flag: str, default: T) -> str | T: ...


def env(flag: str, default: object = None) -> object:
    """Every flag can come from the environment: --cert-dir is GATE_ADMISSION_CERT_DIR."""
    return os.environ.get(ENV_PREFIX + flag.upper().replace("-", "_"), default)


def csv(value: str | None) -> frozenset[str]:
    """A comma-separated list as a set, blanks dropped."""
    return frozenset(part.strip() for part in (value or "").split(",") if part.strip())


def env_mode() -> names.Mode:
    """The mode GATE_ADMISSION_MODE names, enforce without it: --mode's default. Taken as given,
    as argparse takes a default, unchecked against its choices."""
    return cast(names.Mode, env("mode", names.ENFORCE))


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    """--mode, --exempt-users, --exempt-groups, defaulting to their GATE_ADMISSION_* variables."""
    parser.add_argument("--mode", choices=names.MODES, default=env_mode())
    parser.add_argument(
        "--exempt-users", default=env("exempt-users", ""), help="comma-separated users never gated"
    )
    parser.add_argument(
        "--exempt-groups", default=env("exempt-groups", ""), help="comma-separated groups never gated"
    )
    parser.add_argument(
        "--approval-relays",
        default=env("approval-relays", ""),
        help="comma-separated users (the receiver's service account) whose approvals keep the caller "
        "they authenticated: recorded as '<caller> via <user>'",
    )


def policy_settings(args: argparse.Namespace) -> Settings:
    """The decision settings the policy flags describe."""
    return Settings(
        args.mode, csv(args.exempt_users), csv(args.exempt_groups), csv(getattr(args, "approval_relays", ""))
    )
