"""The installed gunicorn still has every internal part admission.transport.gthread_seam relies on,
and nothing outside the seam reaches into gunicorn's internals."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import socket
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from admission.transport import gthread_seam
from admission.transport.gthread_seam import PASSED_THROUGH, RELIES_ON

TRANSPORT = Path(gthread_seam.__file__).parent
PYPROJECT = TRANSPORT.parent.parent / "pyproject.toml"
ADDRESS = ("127.0.0.1", 40000)
# The listening socket's accept(): the worker calls it by the name gthread's hook has, on another object.
SOCKET_CALLS = {"accept"}


def test_the_installed_gunicorn_is_one_the_seam_was_verified_with():
    from gunicorn import __version__

    wanted = [
        Requirement(spec)
        for spec in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
        if Requirement(spec).name == "gunicorn"
    ]
    assert len(wanted) == 1 and wanted[0].specifier.contains(__version__), (
        f"gunicorn {__version__} is installed, pyproject.toml wants {wanted}: "
        "verify it (this file, then tests/server) before changing the range"
    )


@pytest.fixture(scope="module")
def live():
    """gunicorn's objects as the seam gets them: a gthread worker (never run), a connection, a parser."""
    from gunicorn import http
    from gunicorn.config import Config
    from gunicorn.workers.gthread import TConn, ThreadWorker

    cfg = Config()
    worker = ThreadWorker(age=0, ppid=os.getpid(), sockets=[], app=None, timeout=30, cfg=cfg, log=None)
    ours, theirs = socket.socketpair()
    objects = {
        "worker": worker,
        "conn": TConn(cfg, ours, ADDRESS, ADDRESS),
        "parser": http.get_parser(cfg, ours, ADDRESS),
    }
    objects["unreader"] = objects["parser"].unreader
    objects["method_queue"] = worker.method_queue
    try:
        yield objects
    finally:
        worker.tmp.close()
        ours.close()
        theirs.close()


def owners(live) -> dict:
    """The classes RELIES_ON names, found from the objects the seam actually gets."""

    def named(obj, name):
        found = [cls for cls in type(obj).__mro__ if cls.__name__ == name]
        assert found, f"gunicorn: {type(obj).__name__} no longer derives from a class named {name}"
        return found[0]

    return {
        "ThreadWorker": type(live["worker"]),
        "Worker": named(live["worker"], "Worker"),
        "TConn": type(live["conn"]),
        "Parser": named(live["parser"], "Parser"),
        "Unreader": named(live["unreader"], "Unreader"),
        "PollableMethodQueue": type(live["method_queue"]),
        "Config": type(live["worker"].cfg),
    }


def instance_of(live, owner: str):
    return {
        "ThreadWorker": live["worker"],
        "Worker": live["worker"],
        "TConn": live["conn"],
        "Parser": live["parser"],
        "Unreader": live["unreader"],
        "PollableMethodQueue": live["method_queue"],
    }[owner]


def function_tree(classes: dict, where: str) -> ast.AST:
    owner, name = where.split(".")
    function = getattr(classes[owner], name, None)
    assert callable(function), f"gunicorn: {where} is gone"
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def assigns(tree: ast.AST, name: str) -> bool:
    """Whether ``tree`` assigns ``self.<name>`` (alone or in a tuple)."""
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and part.attr == name
                    and getattr(part.value, "id", None) == "self"
                ):
                    return True
    return False


def mentions(tree: ast.AST, name: str) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr == name for node in ast.walk(tree))


def parameters(function) -> tuple:
    return tuple(p for p in inspect.signature(function).parameters if p != "self")


@pytest.mark.parametrize("owner,name,kind,detail", RELIES_ON, ids=[f"{o}.{n}" for o, n, _, _ in RELIES_ON])
def test_gunicorn_has_what_the_seam_relies_on(live, owner, name, kind, detail):
    part = f"gunicorn: {owner}.{name} ({kind})"
    if owner.startswith("gunicorn"):
        found = getattr(importlib.import_module(owner), name, None)
        assert found is not None, f"{part} is gone"
        if kind == "module":
            assert inspect.ismodule(found), f"{part} is no longer a module"
        elif kind == "class":
            assert inspect.isclass(found), f"{part} is no longer a class"
        else:
            assert kind == "function" and callable(found), f"{part} is no longer callable"
            assert parameters(found)[: len(detail)] == detail, (
                f"{part} takes {parameters(found)}, not {detail}"
            )
        return
    classes = owners(live)
    if kind == "setting":
        assert name in live["worker"].cfg.settings, f"{part} is no longer a setting"
    elif kind in ("method", "hook"):
        params = detail if kind == "method" else detail[0]
        function = getattr(classes[owner], name, None)
        assert callable(function), f"{part} is gone"
        found = parameters(function)
        if kind == "method":  # called by the seam: more parameters are fine if they have defaults
            extra = list(inspect.signature(function).parameters.values())[len(params) + 1 :]
            assert found[: len(params)] == params and all(
                p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in extra
            ), f"{part} takes {found}, not {params}"
        else:  # overridden by the seam: gunicorn calls it with exactly these
            assert found == params, f"{part} takes {found}, not {params}"
            assert mentions(function_tree(classes, detail[1]), name), (
                f"{part}: {detail[1]} no longer calls it"
            )
    else:
        assert kind == "attribute", f"unknown kind {kind!r} in RELIES_ON"
        set_in, read_in = detail
        assert assigns(function_tree(classes, set_in), name), f"{part}: {set_in} no longer sets it"
        if set_in.endswith(".__init__"):
            assert hasattr(instance_of(live, owner), name), f"{part}: not set on a new {owner}"
        if read_in:
            assert mentions(function_tree(classes, read_in), name), f"{part}: {read_in} no longer reads it"


def test_the_seams_overrides_have_gunicorns_signatures():
    seam = {"ThreadWorker": gthread_seam.GthreadSeam, "TConn": gthread_seam.SeamConn}
    for owner, name, kind, detail in RELIES_ON:
        if kind == "hook" and owner in seam:
            ours = getattr(seam[owner], name)
            assert parameters(ours) == detail[0], f"gthread_seam: {owner}.{name} takes {parameters(ours)}"
            assert name in vars(seam[owner]), (
                f"gthread_seam does not override {owner}.{name}, yet lists it as a hook"
            )


def gunicorn_names(*objects) -> set:
    """Every attribute name the given gunicorn objects have (their classes' and their own)."""
    names = set()
    for obj in objects:
        names |= set(dir(type(obj))) | set(vars(obj))
    return {name for name in names if not (name.startswith("__") and name.endswith("__"))}


def names_used(path: Path) -> set:
    """Attribute names a module reads or sets, and the names of the methods and class attributes it defines."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {name for name in names if not (name.startswith("__") and name.endswith("__"))}


def gunicorn_imports(path: Path) -> set:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "gunicorn"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gunicorn":
            found |= {(node.module, alias.name) for alias in node.names}
    return found


def test_the_seam_uses_nothing_of_gunicorns_it_does_not_list(live):
    relied = {name for _, name, _, _ in RELIES_ON}
    theirs = gunicorn_names(*live.values()) | set(live["worker"].cfg.settings)
    unlisted = (names_used(TRANSPORT / "gthread_seam.py") & theirs) - relied
    assert not unlisted, (
        f"gthread_seam uses (or shadows) gunicorn's {sorted(unlisted)}: add them to RELIES_ON"
    )
    imported = gunicorn_imports(TRANSPORT / "gthread_seam.py")
    listed = {(owner, name) for owner, name, kind, _ in RELIES_ON if kind in ("module", "class")}
    assert imported <= listed, (
        f"gthread_seam imports {sorted(imported - listed)} from gunicorn, not in RELIES_ON"
    )


def test_the_seam_lists_only_what_it_uses():
    # A stale entry would fail an upgrade for a part nothing relies on any more.
    relied = {name for _, name, _, _ in RELIES_ON}
    assert set(PASSED_THROUGH) <= relied
    stale = (
        relied
        - names_used(TRANSPORT / "gthread_seam.py")
        - set(PASSED_THROUGH)
        - {"__init__"}
        - {name for _, name in gunicorn_imports(TRANSPORT / "gthread_seam.py")}
    )
    assert not stale, f"RELIES_ON lists {sorted(stale)}, which gthread_seam does not use"


def test_the_worker_reaches_gunicorn_only_through_the_seam(live):
    theirs = gunicorn_names(live["worker"], live["conn"])
    for module in ("worker.py", "framing.py", "bounded_socket.py"):
        path = TRANSPORT / module
        assert not gunicorn_imports(path), f"{module} imports gunicorn: only gthread_seam may"
        reached = (names_used(path) & theirs) - set(PASSED_THROUGH) - SOCKET_CALLS
        assert not reached, (
            f"{module} uses (or shadows) gunicorn's {sorted(reached)}: go through gthread_seam"
        )


def test_only_the_seam_imports_gunicorns_worker_and_parser_modules():
    for path in sorted((TRANSPORT.parent).rglob("*.py")):
        if path.name == "gthread_seam.py":
            continue
        imported = {
            module if name is None or module != "gunicorn" else f"gunicorn.{name}"
            for module, name in gunicorn_imports(path)
        }
        inner = {module for module in imported if module.startswith(("gunicorn.workers", "gunicorn.http"))}
        assert not inner, (
            f"{path.relative_to(TRANSPORT.parent.parent)} imports {sorted(inner)}: only gthread_seam may"
        )


def test_the_logger_hook_the_server_overrides_is_still_called():
    """admission.webhook.server.GunicornLogger turns gunicorn's access log off through a private
    hook of gunicorn's Logger: renamed, the access log (and its cost on every review) would come
    back without any test noticing its absence."""
    from gunicorn import glogging
    from gunicorn.config import Config

    from admission.webhook.server import GunicornLogger

    assert callable(getattr(glogging.Logger, "_compute_access_log_enabled", None)), (
        "gunicorn: glogging.Logger._compute_access_log_enabled is gone"
    )
    assert "self._compute_access_log_enabled()" in inspect.getsource(glogging.Logger.setup), (
        "gunicorn: glogging.Logger.setup no longer calls _compute_access_log_enabled"
    )
    assert GunicornLogger._compute_access_log_enabled is not glogging.Logger._compute_access_log_enabled
    assert {"error_log", "access_log"} <= set(vars(glogging.Logger(Config()))), (
        "gunicorn: glogging.Logger no longer has error_log and access_log"
    )
