"""Shell completion of `kubectl gate` in real bash, zsh and fish: subcommands, flags, gate names,
namespaces. Gate names come from --gates-dir here and from the API server in
tests/e2e/test_operators.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import ROOT
from tests.processes import BIN

GATES = ROOT / "examples" / "gates"
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": "/nonexistent"}
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


def bash(script: str) -> list[str]:
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def bash_complete(words: list[str], setup: str, function: str) -> list[str]:
    """COMPREPLY after pressing TAB at the end of ``words`` (the last may be partial or empty)."""
    line = " ".join(words)
    quoted = " ".join(f"'{w}'" for w in words)
    return bash(f"""{setup}
COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9
{function} '{words[0]}' '{words[-1]}' '{words[-2]}' 2>/dev/null
printf '%s\\n' "${{COMPREPLY[@]}}"
""")


ARGCOMPLETE = "source <(gate-admission completion bash)"


@pytest.mark.parametrize(
    "words, expected",
    [
        (
            ["kubectl-gate", ""],
            ["list", "get", "open", "close", "check", "approve", "pending", "board", "calendar", "version"],
        ),
        (["kubectl-gate", "ca"], ["calendar"]),
        (["kubectl-gate", "calendar", "--d"], ["--days"]),
        (["kubectl-gate", "calendar", "-o", ""], ["table", "json", "yaml", "ics"]),
        (
            ["kubectl-gate", "get", "--gates-dir", str(GATES), "-n", "flux-system", ""],
            ["bypass-signoff", "change-freeze", "maintenance", "qa-approval", "sre-approval"],
        ),
        (["kubectl-gate", "get", "--gates-dir", str(GATES), "-n", "flux-system", "s"], ["sre-approval"]),
    ],
)
def test_bash_completes_kubectl_gate_with_argcomplete(words, expected):
    assert bash_complete(words, ARGCOMPLETE, "_python_argcomplete") == expected


def test_bash_completes_gate_admission_too():
    assert bash_complete(["gate-admission", "comp"], ARGCOMPLETE, "_python_argcomplete") == ["completion"]
    assert bash_complete(["gate-admission", "completion", ""], ARGCOMPLETE, "_python_argcomplete") == [
        "bash",
        "zsh",
        "fish",
    ]


def test_kubectl_plugin_completion_protocol():
    # What kubectl (1.26+) runs for `kubectl gate get ... <TAB>`: candidates, then the directive.
    result = subprocess.run(
        ["kubectl_complete-gate", "get", "--gates-dir", str(GATES), "-n", "flux-system", "m"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert result.stdout.splitlines() == ["maintenance", ":4"]
    first = subprocess.run(["kubectl_complete-gate", ""], capture_output=True, text=True, timeout=60, env=ENV)
    assert first.stdout.splitlines()[-1] == ":4"
    assert (
        "calendar\topen and closed intervals of each gate over the coming days" in first.stdout.splitlines()
    )


@pytest.mark.skipif(
    not shutil.which("kubectl") or not BASH_COMPLETION.exists(), reason="needs kubectl and bash-completion"
)
def test_kubectl_gate_completes_through_kubectls_own_bash_completion():
    setup = f"source {BASH_COMPLETION}; source <(kubectl completion bash)"
    assert bash_complete(["kubectl", "gate", "cal"], setup, "__start_kubectl") == ["calendar"]
    assert bash_complete(
        ["kubectl", "gate", "get", "--gates-dir", str(GATES), "-n", "flux-system", "b"],
        setup,
        "__start_kubectl",
    ) == ["bypass-signoff"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="needs zsh")
@pytest.mark.parametrize(
    "buffer, expected",
    [
        ("kubectl-gate cal", ["calendar:open and closed intervals of each gate over the coming days"]),
        (f"kubectl-gate get --gates-dir {GATES} -n flux-system c", ["change-freeze:"]),
        ("gate-admission completion z", ["zsh:"]),
    ],
)
def test_zsh_completes_with_the_same_script(buffer, expected):
    # The generated script runs in real zsh; only _describe (the widget that draws the menu,
    # which needs a terminal) is replaced by one that prints the candidates it is given.
    script = f"""autoload -U compinit is-at-least; compinit -u
source <(gate-admission completion zsh)
_describe() {{ print -rl -- "${{(@P)2}}" }}
BUFFER='{buffer}'; CURSOR=${{#BUFFER}}; words=(${{=BUFFER}})
_python_argcomplete
"""
    result = subprocess.run(
        ["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT
    )
    assert result.stdout.split("\n")[:-1] == expected, result.stderr


def fish_complete(setup: str, line: str, path: str = "") -> list[str]:
    """What fish offers for ``line`` (``complete -C``: the candidates, with their descriptions)."""
    env = {**ENV, "PATH": f"{path}{os.pathsep}{ENV['PATH']}" if path else ENV["PATH"]}
    result = subprocess.run(
        ["fish", "--no-config", "-c", f"{setup} | source; complete -C '{line}'"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.skipif(not shutil.which("fish"), reason="needs fish")
def test_fish_completes_with_gate_admissions_script():
    setup = "gate-admission completion fish"
    assert fish_complete(setup, "kubectl-gate cal") == [
        "calendar\topen and closed intervals of each gate over the coming days"
    ]
    assert fish_complete(setup, f"kubectl-gate get --gates-dir {GATES} -n flux-system s") == ["sre-approval"]
    assert fish_complete(setup, "gate-admission completion ") == ["bash", "fish", "zsh"]


@pytest.mark.skipif(not shutil.which("fish"), reason="needs fish")
def test_fish_completes_kubectl_gate_through_kubectls_own_fish_completion():
    # kubectl (1.26+) asks kubectl_complete-gate; the kubectl built with the API server is new enough.
    assets = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not (Path(assets) / "kubectl").exists():
        pytest.skip("needs the kubectl of KUBEBUILDER_ASSETS")
    setup = "kubectl completion fish"
    assert fish_complete(setup, "kubectl gate cal", assets) == [
        "calendar\topen and closed intervals of each gate over the coming days"
    ]
    assert fish_complete(setup, f"kubectl gate get --gates-dir {GATES} -n flux-system b", assets) == [
        "bypass-signoff"
    ]
