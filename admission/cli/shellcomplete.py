"""The plugin completion protocol kubectl and flux share (Cobra's ``__complete``), over argcomplete and one parser.

One set of candidates for every shell path: argcomplete completes ``kubectl-gate ...`` in bash
and zsh (scripts: ``gate-admission completion``); ``kubectl_complete-gate`` answers kubectl's
plugin completion (kubectl 1.26+) and ``flux-gate __complete`` the flux CLI's
(admission.cli.flux_gate), both with ``complete`` over the same parser and completers
(admission.cli.completion). Completers ask the API server with a short timeout and never raise.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

# Cobra's ShellCompDirective bits, which kubectl and flux read from a plugin's last line ":N".
NO_FILE_COMPLETION, FILTER_DIRS, DEFAULT_COMPLETION = 4, 16, 0
# Values the shell completes better than we can: file names (-f, --kubeconfig), directories.
FILE_FLAGS = {"-f", "--filename", "--kubeconfig"}
DIR_FLAGS = {"--gates-dir"}
# Flags every subcommand takes, which may come before it: `flux -n NS gate list` runs
# `flux-gate -n NS list` (flux passes everything after its own command name verbatim).
COMMON_VALUED = {"-n", "--namespace", "--context", "--kubeconfig", "-o", "--output", "--request-timeout"}
COMMON_SWITCHES = {"--ns-follows-kube-context"}  # flux's, accepted by `flux gate` (admission.cli.flux_gate)


def split_leading(words: list[str]) -> tuple[list[str], list[str]]:
    """The common flags before the subcommand, and the rest (from the subcommand on). A flag
    still waiting for its value ends the leading part."""
    i = 0
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if name in COMMON_VALUED and "=" not in word:
            i += 2
        elif name in COMMON_VALUED or name in COMMON_SWITCHES or (word[:2] in ("-n", "-o") and len(word) > 2):
            i += 1
        else:
            break
    return words[: min(i, len(words))], words[min(i, len(words)) :]


def hoist(words: list[str]) -> list[str]:
    """Common flags given before the subcommand, moved after it (argparse reads them there)."""
    leading, rest = split_leading(words)
    return [rest[0], *leading, *rest[1:]] if leading and rest and not rest[0].startswith("-") else words


def _finder(parser: argparse.ArgumentParser) -> Any:
    from argcomplete.finders import CompletionFinder

    # Flags only once a "-" is typed, as kubectl does.
    return CompletionFinder(parser, always_complete_options=False)


def complete(words: list[str], parser: argparse.ArgumentParser) -> tuple[list[tuple[str, str]], int]:
    """Candidates (value, help) for the last of ``words`` (partial, maybe empty) after the
    others, and the Cobra directive for the shell."""
    words = list(words) or [""]
    head, partial = words[:-1], words[-1]
    if head and head[-1] in FILE_FLAGS | DIR_FLAGS:
        return [], FILTER_DIRS if head[-1] in DIR_FLAGS else DEFAULT_COMPLETION  # the shell's own
    leading, rest = split_leading(head)
    if leading and not rest:  # only common flags so far: their values and names as any subcommand's
        head = ["list", *leading] if partial.startswith("-") or leading[-1] in COMMON_VALUED else []
    else:
        head = hoist(head)
    text = " ".join([shlex.quote(w) for w in head] + [partial])
    finder = _finder(parser)
    matches, state = [], 0
    while (match := finder.rl_complete(text, state)) is not None:
        matches.append(partial + match[len(text) :].rstrip(" "))
        state += 1
    helps = finder.get_display_completions()
    return [(value, " ".join((helps.get(value) or "").split())) for value in matches], NO_FILE_COMPLETION


def print_completions(
    words: list[str],
    parser: argparse.ArgumentParser,
    descriptions: bool = True,
    offered: frozenset[str] = frozenset(),
) -> int:
    """The plugin completion protocol kubectl and flux (Cobra's ``__complete``) share: one
    candidate a line (``value<TAB>help``), then ``:<directive>``. Always exits 0: either CLI
    drops every candidate of a plugin that fails. Flag names in ``offered`` are left out: the
    calling CLI offers them itself."""
    candidates, directive = complete(words, parser)
    for value, help_text in candidates:
        if value in offered:
            continue
        print(f"{value}\t{help_text}" if help_text and descriptions else value)
    print(f":{directive}")
    return 0
