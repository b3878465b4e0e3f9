"""The docs name code that exists, and nothing in the repository cites a tracker's numbers.

Names: every code name that README.md and docs/**/*.md write in one of the forms below must
resolve (docs/design.md, "Conventions", says the same to writers):

- ``admission.pkg.module.Name.attr``, anywhere in the text: the longest prefix that is a module
  imports, and the rest is a chain of attributes (a dataclass field counts).
- ``pkg.module.Name.attr`` in backticks, where ``pkg`` is one of the packages (``core``,
  ``clock``, ``observability``, ``pki``, ``store``, ``ical``, ``kube``, ``webhook``, ``transport``,
  ``cli``):
  the same, with ``admission.`` in front.
- ``module.name()`` in backticks (call parentheses, arguments allowed): ``module`` is a module
  of ``admission`` (by its own name, in any package) or a class defined there, and has ``name``.
  A library's call written this way must be listed in ``FOREIGN``.
- ``admission/pkg/module.py`` anywhere, and ``pkg/module.py`` in backticks: the file exists.
  Paths under ``tests/``, ``bench/``, ``hack/``, ``manifests/``, ``charts/``, ``examples/`` and
  ``docs/`` exist too, and so do the repository files that Markdown links point to.

Bare names (``decide``), fields (``status.artifact``) and other projects' names are prose.

Tracker citations: "issue N", "item N", "#N" (N a number) and the like point into a tracker that is not in
the repository; write the behaviour instead. ``CITATION`` is narrow on purpose: cron's ``MON#5``,
colours (``"#299c46"``), RFC numbers, ADR file numbers and HTTP codes are not citations.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from functools import cache
from pathlib import Path

from tests import ROOT

PACKAGE = ROOT / "admission"
PACKAGES = ("core", "clock", "observability", "pki", "store", "ical", "kube", "webhook", "transport", "cli")
TOP_DIRS = ("admission", "tests", "bench", "hack", "manifests", "charts", "examples", "docs")
# Other libraries' calls the docs write as ``module.name()``.
FOREIGN = frozenset(
    {
        "os",
        "sys",
        "syscall",
        "hmac",
        "gc",
        "bytes",
        "request",
        "json",
        "orjson",
        "yaml",
        "ssl",
        "socket",
        "select",
        "fcntl",
        "signal",
        "time",
        "datetime",
        "zoneinfo",
        "cronsim",
        "icalendar",
        "recurring_ical_events",
        "flask",
        "gunicorn",
        "argcomplete",
        "kubernetes",
        "prometheus_client",
    }
)

_BACKTICKED = re.compile(r"`([^`\n]+)`")
_FULL = re.compile(
    r"(?<![\w./-])admission(?:\.[A-Za-z_]\w*)++(?![\w/-])"
)  # possessive: admission.k8s.io/v1 is no name
_RELATIVE = re.compile(r"^\s*((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?\s*$")
_CALL = re.compile(r"(?<![\w./-])([A-Za-z_]\w*)\.([A-Za-z_]\w*)\(")
_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_DIRS) + r")/[\w./-]*[\w/])")
_PACKAGE_PATH = re.compile(r"^\s*((?:" + "|".join(PACKAGES) + r")/[\w/]*\w\.py)\s*$")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")

# "issue N", "items N", "ticket #N", "PR N", "bug N"; a lone "#N" after a space or a bracket (N a number).
CITATION = re.compile(
    r"\b(?:issues?|items?|tickets?|tasks?|bugs?|PRs?|pull requests?)\s?#?\d+\b"
    r"|(?:^|(?<=[\s(\[]))#\d+\b",
    re.IGNORECASE | re.MULTILINE,
)
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist", "node_modules"}
SKIP_PATHS = {ROOT / "certs", ROOT / "bench" / "results"}


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _code_spans(text: str) -> list[str]:
    """Backticked spans outside fenced blocks (a fence's lines are code, not names in prose)."""
    prose = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.S | re.M)
    return _BACKTICKED.findall(prose)


@cache
def _modules_by_name() -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.setdefault(parts[-1], []).append(".".join(parts))
    return {name: tuple(sorted(modules)) for name, modules in found.items()}


@cache
def _classes_by_name() -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for match in re.finditer(r"^class (\w+)", path.read_text(), re.M):
            found.setdefault(match.group(1), []).append(module)
    return {name: tuple(modules) for name, modules in found.items()}


def _has(obj: object, name: str) -> object:
    if hasattr(obj, name):
        return getattr(obj, name)
    if dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)}:
        return _FIELD
    raise AttributeError(name)


_FIELD = object()


def _import(module: str) -> object | None:
    if (
        not (ROOT / Path(*module.split("."))).with_suffix(".py").exists()
        and not (ROOT / Path(*module.split(".")) / "__init__.py").exists()
    ):
        return None
    return importlib.import_module(module)


def resolve(dotted: str) -> str | None:
    """None when ``admission.x.y...`` names a module and attributes that exist, else why not."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _import(".".join(parts[:cut]))
        if module is None:
            continue
        obj: object = module
        for i, attr in enumerate(parts[cut:], cut):
            if obj is _FIELD:
                return f"{'.'.join(parts[:i])} is a field: nothing to look up in it"
            try:
                obj = _has(obj, attr)
            except AttributeError:
                return f"{'.'.join(parts[:i])} has no {attr!r}"
        return None
    return f"no module {parts[0]!r}"


def resolve_call(owner: str, attr: str) -> str | None:
    """None when ``owner.attr()`` names an attribute of a module or class of ``admission``."""
    places = [
        *_modules_by_name().get(owner, ()),
        *(f"{m}.{owner}" for m in _classes_by_name().get(owner, ())),
    ]
    if not places:
        return None if owner in FOREIGN else f"{owner!r} is no module or class of admission (nor in FOREIGN)"
    if any(resolve(f"{place}.{attr}") is None for place in places):
        return None
    return f"{' or '.join(places)} has no {attr!r}"


def names_in(text: str) -> list[tuple[str, str]]:
    """(how it is written, what is wrong) for every name in ``text`` that does not resolve."""
    wrong: list[tuple[str, str]] = []
    for match in _FULL.finditer(text):
        if (why := resolve(match.group(0))) is not None:
            wrong.append((match.group(0), why))
    for span in _code_spans(text):
        if span.lstrip().startswith("admission"):
            pass  # checked above, anywhere in the text
        elif (relative := _RELATIVE.match(span)) is not None:
            if (why := resolve("admission." + relative.group(1))) is not None:
                wrong.append((span, why))
        if (path := _PACKAGE_PATH.match(span)) is not None and not (PACKAGE / path.group(1)).exists():
            wrong.append((span, "no such file under admission/"))
        for owner, attr in _CALL.findall(span):
            if (why := resolve_call(owner, attr)) is not None:
                wrong.append((span, why))
    return wrong


def paths_in(text: str, where: Path) -> list[tuple[str, str]]:
    wrong = [
        (m.group(1), "no such path")
        for m in _PATH.finditer(text)
        if not (ROOT / m.group(1).rstrip(".")).exists()
    ]
    for target in _LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (where.parent / target).exists():
            wrong.append((target, f"link target missing (from {where.relative_to(ROOT)})"))
    return wrong


# -- the checker can fail --------------------------------------------------------------------------


def test_each_form_resolves_what_exists_and_refuses_what_does_not():
    assert (
        names_in("`admission.core.admission.decision.decide` and admission.core.flux.kinds.FLUX_KINDS") == []
    )
    assert (
        names_in(
            "`core.admission.decision.decide`, `kube.fluxcache.FluxCache`, `core.gates.timeline.intervals(cg, a, b)`"
        )
        == []
    )
    assert names_in("`decision.decide()`, `kinds.lookup(group, kind)`, `GateIndex.lookup()`") == []
    assert names_in("`core/admission/decision.py` and `admission/webhook/app.py`") == []
    assert names_in("`webhook.handlers.Outcome.error`: a dataclass field") == []
    assert (
        names_in(
            "`status.artifact`, `spec.gates`, `decide`, `os.scandir()`, `gate-admission.gate-admission-system.svc`"
        )
        == []
    )
    missing = [
        "`admission.core.admission.decision.no_such_function`",
        "admission.core.no_such_module",
        "`core.admission.decision.NoSuchClass`",
        "`decision.no_such_function()`",
        "`no_such_module.decide()`",
        "`core/no_such_module.py`",
        "`admission.webhook.handlers.Outcome.error.deeper`",
    ]
    for text in missing:
        assert names_in(text), text


def test_paths_and_links_that_do_not_exist_are_found():
    here = ROOT / "docs" / "design.md"
    assert (
        paths_in("`tests/unit/test_docs_names.py`, [ops](operations.md#install), bench/README.md.", here)
        == []
    )
    assert paths_in("`tests/unit/no_such_test.py`", here)
    assert paths_in("[gone](decisions/9999-no-such-record.md)", here)


def test_the_citation_pattern_is_narrow():
    for cited in (
        "issue " + "12",
        "Issue " + "13's contract",
        "(issue " + "14, item " + "3)",
        "item " + "9:",
        "ticket #" + "4",
        "see #" + "12",
        "(#" + "7)",
        "PR " + "30",
        "tasks " + "2",
    ):
        assert CITATION.search(cited), cited
    for fine in (
        "0 12 * * MON#" + "5",
        "* * * * 5#" + "3",
        '"color": "#' + '299c46"',
        '"#' + '000000"',
        "RFC 5545",
        "RFC-0006",
        "docs/decisions/0012-owner-references.md",
        "HTTP 503",
        "items[0]",
        "for item in items:",
        "Issuer",
        "issues a certificate",
        "3 items",
        "x = 1  # 2 more",
    ):
        assert not CITATION.search(fine), fine


# -- the repository -----------------------------------------------------------------------------


def test_every_code_name_in_the_docs_exists():
    wrong = [
        f"{path.relative_to(ROOT)}: {written}: {why}"
        for path in docs()
        for written, why in names_in(path.read_text())
    ]
    assert not wrong, "names in the docs that the code does not have:\n" + "\n".join(wrong)


def test_every_path_and_link_in_the_docs_exists():
    wrong = [
        f"{path.relative_to(ROOT)}: {written}: {why}"
        for path in docs()
        for written, why in paths_in(path.read_text(), path)
    ]
    assert not wrong, "paths in the docs that the repository does not have:\n" + "\n".join(wrong)


def test_design_section_references_name_a_section():
    """``docs/design.md, "Hold points"`` in code and docs names a heading of docs/design.md."""
    headings = {h.strip() for h in re.findall(r"^#+ (.+)$", (ROOT / "docs" / "design.md").read_text(), re.M)}
    cited = re.compile(r'design\.md[,:]? "([^"]+)"')
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {section!r}"
        for path in text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for section in cited.findall(line)
        if not any(h.startswith(section) for h in headings)
    ]
    assert not wrong, "references to sections docs/design.md does not have:\n" + "\n".join(wrong)


def text_files() -> list[Path]:
    """The repository's text files: what git would track (its ignored directories left out)."""
    found = []
    stack = [ROOT]
    while stack:
        directory = stack.pop()
        for entry in sorted(directory.iterdir()):
            if entry.is_dir():
                if (
                    entry.name not in SKIP_DIRS
                    and not entry.name.endswith(".egg-info")
                    and entry not in SKIP_PATHS
                    and not (entry.name.startswith(".") and entry.name != ".ci")
                ):
                    stack.append(entry)
            elif entry.is_file() and entry.stat().st_size < 4 << 20:
                head = entry.read_bytes()[:8192]
                if b"\0" not in head:
                    found.append(entry)
    return found


def test_nothing_cites_a_tracker():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}: {line.strip()[:120]}"
        for path in text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for match in CITATION.finditer(line)
    ]
    assert not found, (
        "tracker citations (the tracker is not in the repository: say what the behaviour is):\n"
        + "\n".join(found)
    )
