"""The file store behind --gates-dir: reloads, broken files, duplicates."""

from __future__ import annotations

import pytest

from admission.store.files import FileStore
from tests.builders import at, gate, keeper
from tests.conftest import write_gates
from tests.polling import until

NOW = at("2026-06-10T12:00")


def test_multi_document_yaml_with_gates_and_keepers(gates_dir):
    write_gates(gates_dir, [gate("a", closed=True), gate("b"), keeper("k", "b", closed=["@always"])])
    store = FileStore(gates_dir)
    assert not store.lookup("flux-system", "a", NOW).open
    b = store.lookup("flux-system", "b", NOW)
    assert not b.open and b.reason == "Scheduled"
    assert store.lookup("flux-system", "missing", NOW).reason == "NotFound"


def test_kind_list_documents_and_other_kinds_are_read(gates_dir):
    (gates_dir / "list.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: gating.toolkit.fluxcd.io/v1alpha1, kind: Gate, metadata: {name: x, namespace: ns}, spec: {}}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n")
    store = FileStore(gates_dir)
    assert store.lookup("ns", "x", NOW).open and not store.problems


def test_an_unquoted_timestamp_means_what_kubectl_apply_would_make_of_it(gates_dir):
    # kubectl sends it as a string; YAML 1.1 alone would read a datetime, and the toggle be ignored.
    (gates_dir / "g.yaml").write_text(
        "kind: Gate\nmetadata:\n  name: sre-approval\n  namespace: flux-system\n  annotations:\n"
        "    open.gate.fluxcd.io/requestedAt: 2026-06-10T11:00:00Z\n"
        "    close.gate.fluxcd.io/requestedAt: 2026-06-10T13:00:00Z\nspec: {closed: true}\n")
    state = FileStore(gates_dir).lookup("flux-system", "sre-approval", NOW)
    assert (state.open, state.reason) == (True, "OpenRequested"), state.message


def test_a_gate_without_namespace_lives_in_default(gates_dir):
    (gates_dir / "g.yaml").write_text("kind: Gate\nmetadata: {name: plain}\nspec: {closed: true}\n")
    assert FileStore(gates_dir).lookup("default", "plain", NOW).reason == "Default"


def test_changes_to_files_are_picked_up_by_the_watcher(gates_dir):
    path = write_gates(gates_dir, [gate("a", closed=True)])
    store = FileStore(gates_dir, poll_interval=0.05)
    store.start()
    try:
        assert not store.lookup("flux-system", "a", NOW).open
        path.write_text(path.read_text().replace("closed: true", "closed: false") + "\n")
        assert until(lambda: store.lookup("flux-system", "a", NOW).open, bool, timeout=5)
    finally:
        store.stop()


def test_a_broken_file_is_reported_and_its_gates_are_closed(gates_dir):
    path = write_gates(gates_dir, [gate("a"), gate("b")], "team.yaml")
    write_gates(gates_dir, [gate("c")], "other.yaml")
    store = FileStore(gates_dir)
    assert store.lookup("flux-system", "a", NOW).open
    path.write_text("kind: Gate\nmetadata: {name: a\n  broken: [")
    store.reload()
    for name in ("a", "b"):
        state = store.lookup("flux-system", name, NOW)
        assert (state.open, state.reason) == (False, "Invalid")
        assert "gates file team.yaml is broken" in state.message
    assert store.lookup("flux-system", "c", NOW).open
    ready, detail = store.readiness()
    assert ready and "team.yaml is broken" in detail["problems"][str(path)]


def test_a_file_that_was_never_good_leaves_its_gates_not_found(gates_dir):
    (gates_dir / "bad.yaml").write_text("kind: Gate\nmetadata: []\n")
    store = FileStore(gates_dir)
    assert store.lookup("flux-system", "a", NOW).reason == "NotFound"
    assert "has no metadata.name" in next(iter(store.problems.values()))


def test_a_gate_defined_in_two_files_is_invalid(gates_dir):
    write_gates(gates_dir, [gate("a")], "one.yaml")
    write_gates(gates_dir, [gate("a")], "two.yaml")
    state = FileStore(gates_dir).lookup("flux-system", "a", NOW)
    assert state.reason == "Invalid" and "defined in both one.yaml and two.yaml" in state.message


def test_a_missing_directory_is_a_problem_not_a_crash(tmp_path):
    store = FileStore(tmp_path / "nowhere")
    assert store.lookup("flux-system", "a", NOW).reason == "NotFound"
    assert "does not exist" in next(iter(store.readiness()[1]["problems"].values()))


def test_states_are_memoised_until_they_can_change(gates_dir):
    write_gates(gates_dir, [gate("a"), keeper("k", "a", closed=["* 13 * * *"])])
    store = FileStore(gates_dir)
    first = store.lookup("flux-system", "a", NOW)
    assert store.lookup("flux-system", "a", at("2026-06-10T12:30")) is first
    later = store.lookup("flux-system", "a", at("2026-06-10T13:00"))
    assert later is not first and not later.open
    # A clock that goes backwards gets a fresh evaluation, not the memo.
    assert store.lookup("flux-system", "a", NOW).open


def test_backoff_grows_to_its_cap_and_survives_a_long_outage():
    from admission.kube.reflector import Backoff

    backoff = Backoff(first=0.2, cap=30.0)
    delays = [backoff.next() for _ in range(5000)]
    assert 0.1 <= delays[0] <= 0.2 and all(15.0 <= d <= 30.0 for d in delays[10:])
    backoff.reset()
    assert backoff.next() <= 0.2


# -- hostile and half-written files (issue 14, item 5) ----------------------------------------
def _closed_gate_file(gates_dir):
    return write_gates(gates_dir, [gate("bypass-signoff", default="closed"), gate("other")], "team.yaml")


def test_yaml_aliases_are_refused_before_they_expand(gates_dir):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 6)]  # 10^6 strings
    (gates_dir / "bomb.yaml").write_text("\n".join(levels) + "\nkind: Gate\nmetadata: {name: bomb}\n")
    store = FileStore(gates_dir)
    assert "aliases (*name) are not accepted" in store.problems[str(gates_dir / "bomb.yaml")]
    assert store.lookup("default", "bomb", NOW).reason == "NotFound"


def test_a_file_over_the_size_limit_is_broken_and_its_gates_stay_closed(gates_dir):
    from admission.store import files

    path = _closed_gate_file(gates_dir)
    store = FileStore(gates_dir)
    path.write_text(path.read_text() + "#" * files.MAX_FILE)
    store.reload()
    state = store.lookup("flux-system", "bypass-signoff", NOW)
    assert (state.open, state.reason) == (False, "Invalid") and "larger than" in state.message


def test_a_file_rewritten_in_place_is_read_only_once_it_holds_still(gates_dir):
    path = _closed_gate_file(gates_dir)
    full = path.read_text()
    store = FileStore(gates_dir)
    # The writer has written up to "spec:" and pauses: an empty spec would be open by default.
    path.write_text(full[:full.index("default: closed")])
    assert store.check() is False
    state = store.lookup("flux-system", "bypass-signoff", NOW)
    assert (state.open, state.reason) == (False, "Default"), "a half-written file opened a closed gate"
    path.write_text(full.replace("name: other", "name: other2"))  # the write completes
    assert store.check() is False  # changed again since the last poll: wait one more
    assert store.check() is True
    assert not store.lookup("flux-system", "bypass-signoff", NOW).open
    assert store.lookup("flux-system", "other2", NOW).open


def _scan_races_a_vanishing_directory(monkeypatch):
    """Make listing the directory fail as scandir does when a directory goes mid-scan: that
    race cannot be produced on demand, so it is stood in for at the filesystem boundary."""
    from pathlib import Path

    def vanished(self, pattern):
        raise FileNotFoundError(2, "No such file or directory")
        yield

    monkeypatch.setattr(Path, "rglob", vanished)


def test_a_directory_vanishing_while_it_is_scanned_keeps_the_gates_last_read(gates_dir, monkeypatch):
    write_gates(gates_dir, [gate("release"), gate("freeze", default="closed")])
    store = FileStore(gates_dir)
    with monkeypatch.context() as race:
        _scan_races_a_vanishing_directory(race)
        store.reload()
        assert not store.check()  # a failed listing is not taken for a change
    assert store.lookup("flux-system", "release", NOW).open is True  # not dropped to NotFound
    assert store.lookup("flux-system", "freeze", NOW).open is False
    assert "changed while it was read" in store.problems[str(gates_dir)]
    until(store.check, bool, timeout=5, interval=0)  # read again once it lists whole
    assert str(gates_dir) not in store.problems


def test_a_directory_vanishing_while_it_is_first_scanned_does_not_stop_the_store(gates_dir, monkeypatch):
    write_gates(gates_dir, [gate("release")])
    with monkeypatch.context() as race:
        _scan_races_a_vanishing_directory(race)
        store = FileStore(gates_dir)
    state = store.lookup("flux-system", "release", NOW)
    assert (state.open, state.reason) == (False, "NotFound")  # nothing read yet: closed
    assert "changed while it was read" in store.problems[str(gates_dir)]
    until(store.check, bool, timeout=5, interval=0)
    assert store.lookup("flux-system", "release", NOW).open is True


def test_the_same_gate_twice_in_one_file_is_invalid_and_reported(gates_dir):
    write_gates(gates_dir, [gate("twice"), gate("twice", default="closed")], "dup.yaml")
    store = FileStore(gates_dir)
    state = store.lookup("flux-system", "twice", NOW)
    assert (state.open, state.reason) == (False, "Invalid")
    assert "defined twice in dup.yaml" in state.message
    assert "flux-system/twice" in store.problems


def test_yaml_errors_say_where_and_what_without_quoting_the_file(gates_dir):
    (gates_dir / "secret.yaml").write_text("password: hunter2-do-not-log\ntoken: [unclosed\n")
    store = FileStore(gates_dir)
    problem = store.problems[str(gates_dir / "secret.yaml")]
    assert "hunter2" not in problem and "unclosed" not in problem
    assert "secret.yaml is broken: invalid YAML at line" in problem and "column" in problem


def test_a_writer_that_pauses_mid_write_never_has_its_half_written_file_read(gates_dir):
    path = _closed_gate_file(gates_dir)
    full = path.read_text()
    store = FileStore(gates_dir)
    if store._writes is None or store._writes.pending() is None:
        pytest.skip("no inotify here: only the hold-still rule applies")
    with open(path, "w") as writer:  # rewritten in place: truncated, then written in two goes
        writer.write(full[:full.index("default: closed")])
        writer.flush()
        write_gates(gates_dir, [gate("canary")], "canary.yaml")  # meanwhile another file changes
        until(lambda: (store.check(), store.lookup("flux-system", "canary", NOW).open)[1], bool, timeout=10)
        for _ in range(5):  # however many polls the pause lasts
            store.check()
            state = store.lookup("flux-system", "bypass-signoff", NOW)
            assert (state.open, state.reason) == (False, "Default"), "a half-written file opened a closed gate"
        assert store.readiness()[1]["being_written"] == [str(path)]
        writer.write(full[full.index("default: closed"):].replace("name: other", "name: other2"))
    until(lambda: (store.check(), store.lookup("flux-system", "other2", NOW).open)[1], bool, timeout=10)
    assert not store.lookup("flux-system", "bypass-signoff", NOW).open
    assert "being_written" not in store.readiness()[1]


def test_a_file_replaced_by_rename_is_not_taken_for_one_being_written(gates_dir):
    path = _closed_gate_file(gates_dir)
    store = FileStore(gates_dir)
    staged = gates_dir / ".team.yaml.tmp"
    staged.write_text(path.read_text().replace("name: other", "name: other3"))
    staged.rename(path)
    until(lambda: store.check(), bool, timeout=10)
    assert store.lookup("flux-system", "other3", NOW).open and not store.being_written
