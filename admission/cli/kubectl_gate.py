"""``kubectl gate``: list, inspect, open and close gates, and check manifests in CI.

Exit codes a script can rely on:
  0  done; for ``check``, nothing would be denied (allowed with an audit warning is not a failure)
  1  ``check``: applying the manifest now would be denied for at least one object
  2  usage error (bad flags, bad duration, unreadable manifest), found before the cluster is asked
  3  not found (the gate, or the namespace's gates)
  4  forbidden (RBAC) or unauthorized
  5  no cluster (no kubeconfig, API server unreachable, or no answer within --request-timeout)
  6  ``--gates-dir``: a gates file (or the directory) cannot be used, or a gate it defines is
     invalid (an unknown field, a bad zone, cron or duration) or has input that is ignored (a
     toggle that cannot be read); every problem is printed on stderr, and the answer printed is
     the server's with that directory (the gates such a file may define are closed). ``check``
     exits 1 rather than 6 when something would be denied.
  7  conflict (409): the object changed meanwhile; run the command again
  8  the API server refused the request as invalid (400, 422)
  9  the API server answered another error (5xx, 429, ...)
  10 ``check``: an object could not be judged (the webhook down, the dry-run forbidden, the
     object invalid or conflicting); never reported as allowed. ``check`` exits 1 rather than 10
     when something would be denied.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from admission import __version__
from admission.cli import approve, board, completion, parsing
from admission.cli.check import cmd_check
from admission.cli.cluster import DEFAULT_REQUEST_TIMEOUT, EXIT_BAD_GATES_DIR, EXIT_OK, GateError
from admission.cli.dryrun import DEFAULT_FIELD_MANAGER
from admission.cli.gate_commands import (
    add_watch_flags,
    cmd_calendar,
    cmd_get,
    cmd_list,
    cmd_toggle,
    cmd_version,
    show,
)
from admission.cli.settings import add_policy_flags
from admission.cli.shellcomplete import hoist, print_completions


def complete_main(argv: list[str] | None = None) -> int:
    """``kubectl_complete-gate ARGS... PARTIAL``: kubectl's plugin completion protocol."""
    return print_completions(list(sys.argv[1:] if argv is None else argv), build_parser())


# -- parser -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    """What differs between `kubectl gate` and `flux gate` (admission.cli.flux_gate): the name in
    help, and the namespace a command uses without -n."""

    prog: str = "kubectl gate"
    command: str = "kubectl-gate"  # the executable, as --version names it
    namespace_help: str = "namespace (default: the context's)"
    default_namespace: Callable[[argparse.Namespace], str | None] | None = None  # None: the context's
    switches: tuple[tuple[str, str], ...] = ()  # more common flags: (name, help)


KUBECTL = Flavor()


def _completes(action: argparse.Action, completer: Callable[..., list[str]]) -> None:
    """Have argcomplete offer what ``completer`` returns for ``action``'s values."""
    action.completer = completer  # type: ignore[attr-defined]  # argcomplete's attribute, read by name


def build_parser(flavor: Flavor = KUBECTL) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context")
    _completes(common.add_argument("-n", "--namespace", help=flavor.namespace_help), completion.namespaces)
    common.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    common.add_argument(
        "--request-timeout",
        type=parsing.request_timeout,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="DURATION",
        help=f"give up on one API call after this long (30s, 2m; 0: never; default {DEFAULT_REQUEST_TIMEOUT:g}s)",
    )
    for switch, help_text in flavor.switches:
        common.add_argument(switch, action="store_true", help=help_text)
    parser = argparse.ArgumentParser(
        prog=flavor.prog,
        description="Open, close and inspect Flux gates.",
        epilog=__doc__.split("\n\n", 1)[1],
    )
    version = f"{flavor.command} {__version__}"
    parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "list",
        parents=[common],
        help="gates with their state, what references them and how many objects they hold "
        "(HELD: new content waits there)",
    )
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    add_watch_flags(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "get",
        parents=[common],
        help="one gate: state, why, until when, what it holds, what waits and what is served",
    )
    _completes(p.add_argument("name"), completion.gate_names)
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_get)

    for action in ("open", "close"):
        p = sub.add_parser(
            action, parents=[common], help=f"{action} a gate now (writes the toggle annotation)"
        )
        _completes(p.add_argument("name"), completion.gate_names)
        _completes(
            p.add_argument("text", nargs="?", metavar="MESSAGE", help="why, as -m gives it"),
            completion.no_candidates,
        )
        p.add_argument("-m", "--message", help="why: shown in Events, logs and `get`")
        p.add_argument("--requested-by", help="who asks (default: the kubeconfig user)")
        if action == "open":
            p.add_argument(
                "--for",
                dest="for_",
                metavar="DURATION",
                help="close again after this long (Go duration, e.g. 2h)",
            )
        p.set_defaults(func=cmd_toggle, action=action, gates_dir=None)

    p = sub.add_parser(
        "check", parents=[common], help="would the webhook deny applying these Flux objects now?"
    )
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "-f",
        "--filename",
        action="append",
        help="a manifest file, a directory of them (.yaml, .yml, .json) or - for stdin; repeatable",
    )
    given.add_argument(
        "-k",
        "--kustomize",
        metavar="DIR",
        help="the objects `kubectl kustomize DIR` renders, as `kubectl apply -k DIR` applies them",
    )
    p.add_argument(
        "-R", "--recursive", action="store_true", help="with -f DIR: the directories within it too"
    )
    p.add_argument("--no-headers", action="store_true", help="the table without its header line")
    p.add_argument(
        "--gates-dir",
        help="judge offline, in process, against gates in YAML files (every object is a CREATE); "
        "without it, the API server is asked by a server-side dry-run",
    )
    p.add_argument(
        "--field-manager",
        default=DEFAULT_FIELD_MANAGER,
        help=f"against a cluster: the field manager the dry-run applies as (default {DEFAULT_FIELD_MANAGER!r}, "
        "as kubectl apply --server-side; Flux's kustomize-controller applies as 'kustomize-controller')",
    )
    p.add_argument(
        "--force-conflicts",
        action="store_true",
        help="against a cluster: take over fields another manager owns, as kubectl apply --server-side "
        "--force-conflicts and Flux do (without: a conflict is reported, not judged)",
    )
    p.add_argument(
        "--judge-as",
        metavar="USER",
        help="judge as this user: offline, the user the webhook is shown; against a cluster, the dry-run "
        "impersonates them (your RBAC must allow it; default: the caller, as the API server "
        "authenticates it)",
    )
    p.add_argument(
        "--judge-as-group",
        dest="judge_as_groups",
        metavar="GROUP",
        action="append",
        default=[],
        help="with --judge-as: a group of that user (repeatable)",
    )
    # The old spellings, for one release: kubectl's --as impersonates, which these did not.
    p.add_argument("--as", dest="as_user", metavar="USER", help="deprecated: --judge-as")
    p.add_argument(
        "--as-group",
        dest="as_groups",
        metavar="GROUP",
        action="append",
        default=[],
        help="deprecated: --judge-as-group",
    )
    add_policy_flags(p)  # the server's --mode and exempt lists, from the same GATE_ADMISSION_* variables
    p.set_defaults(func=cmd_check)

    approve.add_parsers(sub, common, _completes)  # approve, pending (docs/decisions/0057)
    board.add_parser(sub, common)  # the gate board (docs/decisions/0072)
    # Subcommands share their parents' actions: calendar's wider -o belongs to a copy.
    calendar_common = copy.deepcopy(common)
    next(a for a in calendar_common._actions if a.dest == "output").choices = ("table", "json", "yaml", "ics")
    p = sub.add_parser(
        "calendar",
        parents=[calendar_common],
        help="open and closed intervals of each gate over the coming days",
    )
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument(
        "--days", type=int, default=14, help="how many days, from today in each gate's time zone (default 14)"
    )
    p.add_argument("--gates-dir", help="read gates from YAML files instead of the cluster")
    p.set_defaults(func=cmd_calendar)
    p = sub.add_parser("version", help="this command's version (no cluster is asked)")
    p.set_defaults(func=cmd_version, version=version)
    for p in sub.choices.values():  # on each subcommand: completers see the subcommand's namespace
        p.set_defaults(default_namespace=flavor.default_namespace)
    return parsing.plain_help(parser)


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = parser or build_parser()
    import argcomplete

    # Answers the shell's completion request and exits; does nothing otherwise.
    argcomplete.autocomplete(parser, always_complete_options=False)
    args = parsing.parse(parser, hoist(list(sys.argv[1:] if argv is None else argv)))
    try:
        args.namespace = completion.namespace_of(args)
        code = args.func(args)
        sys.stdout.flush()  # here, where a reader gone away is caught below, not at exit
    except GateError as err:
        show([f"error: {err}"], sys.stderr)
        return err.code
    except BrokenPipeError:  # `kubectl gate list | head -1`: the reader had enough; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_OK
    return EXIT_BAD_GATES_DIR if code == EXIT_OK and getattr(args, "gates_dir_problems", None) else code


if __name__ == "__main__":
    sys.exit(main())
