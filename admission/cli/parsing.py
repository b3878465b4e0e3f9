"""How ``kubectl gate``, ``flux gate`` and ``gate-admission`` read their command lines: help as
plain text, an unknown flag answered with its own subcommand's usage, and the values of
``--request-timeout`` (docs/decisions/0080-the-cli-as-kubectl-users-expect-it.md)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from admission.core.base.timefmt import parse_duration

# The docstrings and help strings are written for the code's readers, with reStructuredText's
# literals (``x``) and Markdown's (`x`): a terminal would show the marks as they are.
_LITERAL = re.compile(r"``(.+?)``|`([^`\n]+)`")


def plain(text: str) -> str:
    """``text`` without literal marks: what ``--help`` prints."""
    return _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)


class PlainHelp(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (their line breaks are layout), every text unmarked."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name (none: empty)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` and every subcommand's, printing their help as plain text."""
    parser.formatter_class = PlainHelp
    for sub in subcommands(parser).values():
        plain_help(sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """argparse's reading, but a flag no parser knows is reported by the subcommand it was given
    to, with that subcommand's usage (argparse reports it with the top level's: the list of
    subcommands, which does not say which flags were possible). Exits 2, as for any usage error."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        own = parser
        while (found := subcommands(own)) and getattr(args, "command", None) in found:
            own = found[args.command]
            if not subcommands(own):
                break
        own.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def request_timeout(text: str) -> float | None:
    """kubectl's --request-timeout: a duration (``30s``, ``2m``), a bare number of seconds, or
    0 for none. The seconds, None for none; argparse's error (exit 2) for anything else."""
    try:
        seconds = float(text) if re.fullmatch(r"\d+(\.\d+)?", text.strip()) else None
        if seconds is None:
            seconds = parse_duration(text).total_seconds()
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a timeout cannot be negative")
    return seconds or None
