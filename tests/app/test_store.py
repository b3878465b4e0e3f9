"""The file store behind --gates-dir: reloads, broken files, duplicates."""

from __future__ import annotations

import pytest
import yaml

from admission.store import writers
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
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n"
    )
    store = FileStore(gates_dir)
    assert store.lookup("ns", "x", NOW).open and not store.problems


def test_an_unquoted_timestamp_means_what_kubectl_apply_would_make_of_it(gates_dir):
    # kubectl sends it as a string; YAML 1.1 alone would read a datetime, and the toggle be ignored.
    (gates_dir / "g.yaml").write_text(
        "kind: Gate\nmetadata:\n  name: sre-approval\n  namespace: flux-system\n  annotations:\n"
        "    open.gate.fluxcd.io/requestedAt: 2026-06-10T11:00:00Z\n"
        "    close.gate.fluxcd.io/requestedAt: 2026-06-10T13:00:00Z\nspec: {closed: true}\n"
    )
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


def test_a_gate_of_no_known_namespace_in_a_file_never_read_whole_makes_every_gate_unknown(gates_dir):
    (gates_dir / "bad.yaml").write_text("kind: Gate\nmetadata: []\n")
    write_gates(gates_dir, [gate("elsewhere")], "good.yaml")
    store = FileStore(gates_dir)
    for name in ("a", "elsewhere"):  # it may be any gate: which namespace it meant is unknown
        state = store.lookup("flux-system", name, NOW)
        assert (state.open, state.reason) == (False, "Unknown") and "bad.yaml is broken" in state.message
    assert "has no metadata.name" in store.problems[str(gates_dir / "bad.yaml")]


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
    # The default retries within 5 s once the API server is back, however long it was away.
    default = Backoff()
    assert max(default.next() for _ in range(5000)) <= 5.0
    backoff.reset()
    assert backoff.next() <= 0.2


# -- hostile and half-written files -------------------------------------------------------------
def _closed_gate_file(gates_dir):
    return write_gates(gates_dir, [gate("bypass-signoff", default="closed"), gate("other")], "team.yaml")


def test_yaml_aliases_are_refused_before_they_expand(gates_dir):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 6)]  # 10^6 strings
    (gates_dir / "bomb.yaml").write_text("\n".join(levels) + "\nkind: Gate\nmetadata: {name: bomb}\n")
    store = FileStore(gates_dir)
    assert "aliases (*name) are not accepted" in store.problems[str(gates_dir / "bomb.yaml")]
    state = store.lookup("default", "bomb", NOW)  # what the rest of the file defines is unknown: closed
    assert (state.open, state.reason) == (False, "Unknown") and "bomb.yaml is broken" in state.message


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
    path.write_text(full[: full.index("default: closed")])
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
    import os

    def vanished(path="."):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "scandir", vanished)


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
    assert (state.open, state.reason) == (False, "Unknown")  # nothing read yet: closed
    assert "never listed whole" in state.message
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
        writer.write(full[: full.index("default: closed")])
        writer.flush()
        write_gates(gates_dir, [gate("canary")], "canary.yaml")  # meanwhile another file changes
        until(lambda: (store.check(), store.lookup("flux-system", "canary", NOW).open)[1], bool, timeout=10)
        for _ in range(5):  # however many polls the pause lasts
            store.check()
            state = store.lookup("flux-system", "bypass-signoff", NOW)
            assert (state.open, state.reason) == (False, "Default"), (
                "a half-written file opened a closed gate"
            )
        assert store.readiness()[1]["being_written"] == [str(path)]
        writer.write(full[full.index("default: closed") :].replace("name: other", "name: other2"))
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


# -- writers racing the store: no half-written file opens a closed gate ------------------------
# The file's old and new content both close bypass-signoff; the new one opens release-freeze,
# and ends with done-marker (closed by default): release-freeze may be open only in a store
# that has read the new content to its last line.

BYPASS, RELEASE, MARKER = (
    ("flux-system", "bypass-signoff"),
    ("flux-system", "release-freeze"),
    ("flux-system", "done-marker"),
)
OLD = [
    gate("bypass-signoff", interval="30s", default="closed"),
    gate("release-freeze", interval="30s", default="closed"),
]
NEW = [
    gate("bypass-signoff", interval="30s", default="closed"),
    gate("release-freeze", interval="30s", default="opened"),
    gate("done-marker", interval="30s", default="closed"),
]
NEW_TEXT = yaml.safe_dump_all(NEW, sort_keys=False)
# Up to `interval: 30s` of bypass-signoff: that much parses, and is open by default.
HALF = NEW_TEXT.index("default: closed")


def _wrong(store) -> str | None:
    """What a store answers that no whole version of the file says, or None."""
    if store.lookup(*BYPASS, NOW).open:
        return "bypass-signoff is open"
    marker = store.lookup(*MARKER, NOW)
    if store.lookup(*RELEASE, NOW).open and (marker.open, marker.reason) != (False, "Default"):
        return f"release-freeze is open, but the file was not read whole ({marker.reason})"
    return None


def _settles(store) -> None:
    """Once the writer has finished, the store reads the new content."""
    until(lambda: (store.check(), store.lookup(*RELEASE, NOW).open)[1], bool, timeout=10, interval=0)
    assert store.lookup(*RELEASE, NOW).open and _wrong(store) is None, store.problems


def _watched(store) -> bool:
    return store._writes is not None and store._writes.pending() is not None


def _team_file(gates_dir):
    write_gates(gates_dir, [gate("elsewhere")], "other.yaml")
    return write_gates(gates_dir, OLD, "team.yaml")


@pytest.fixture(params=["leases", "no leases"])
def leases(request, monkeypatch):
    """With read leases (the kernel refuses one while the file is open for writing), and without
    (a file owned by another user, or a file system without them): inotify and the file's
    version before and after the read are what is left."""
    if request.param == "no leases":
        monkeypatch.setattr(writers, "_LEASES", False)
    return request.param


@pytest.mark.parametrize("point", range(1, 6))  # a poll that reads the file makes 5 reads
def test_a_writer_that_starts_rewriting_while_the_store_polls_never_opens_the_gate(gates_dir, leases, point):
    from tests.interleave import Writer, during

    path = _team_file(gates_dir)
    store = FileStore(gates_dir)
    if not _watched(store):
        pytest.skip("no inotify here (or its per-user limit is reached): the poll makes other reads")
    path.write_text(yaml.safe_dump_all(OLD + [gate("canary")], sort_keys=False))  # a whole change...
    store.check()  # ...seen once: the next poll reads the file
    writer = Writer(path, NEW_TEXT, [HALF])
    # The writer truncates the file and writes up to `interval: 30s` after the store's
    # `point`-th read of the poll (its inotify queue, the file itself), then pauses.
    during(writer, {point}, store.check, per_point=2)
    assert writer.written == 1 and writer.mid_write
    for _ in range(3):  # however many polls the pause lasts
        assert _wrong(store) is None
        store.check()
    assert store.being_written == [str(path)]
    writer.finish()
    _settles(store)


def test_a_worker_started_while_a_writer_pauses_mid_rewrite_keeps_its_gates_closed(gates_dir):
    from tests.interleave import Writer

    path = _team_file(gates_dir)
    writer = Writer(path, NEW_TEXT, [HALF])
    writer.steps(2)  # truncated, and written up to `interval: 30s`: then a long pause
    store = FileStore(gates_dir)  # a worker starts (or restarts) now
    for key in (BYPASS, RELEASE, ("flux-system", "elsewhere")):
        state = store.lookup(*key, NOW)
        assert (state.open, state.reason) == (False, "Unknown"), state
        assert "team.yaml was being written when the store started" in state.message
    assert store.readiness()[1]["being_written"] == [str(path)]
    store.check()
    assert _wrong(store) is None and not store.lookup("flux-system", "elsewhere", NOW).open
    writer.finish()
    _settles(store)
    assert store.lookup("flux-system", "elsewhere", NOW).open


def test_a_read_torn_by_a_writer_is_thrown_away(gates_dir, monkeypatch):
    """Without leases nothing stops a writer mid-read: the read is checked after the fact."""
    from tests.interleave import Writer, during

    monkeypatch.setattr(writers, "_LEASES", False)
    path = _team_file(gates_dir)
    store = FileStore(gates_dir, inotify=False)  # nor inotify: the file's version alone tells
    path.write_text(NEW_TEXT.replace("done-marker", "done-marker-old"))
    store.check()
    writer = Writer(path, NEW_TEXT, [HALF])
    # The poll's first os.read is of the file's content: the writer truncates and writes half
    # right after it, before the store has finished reading.
    during(writer, {1}, store.check, per_point=2)
    assert writer.written == 1 and writer.mid_write
    assert _wrong(store) is None and store.being_written == [str(path)]
    assert store.lookup("flux-system", "done-marker-old", NOW).reason == "NotFound"  # nothing was taken
    writer.finish()
    _settles(store)


CONFIGS = {"leases and inotify": {}, "inotify only": {"leases": False}, "leases only": {"inotify": False}}


def _interleavings():
    from hypothesis import strategies as st

    points = st.frozensets(st.integers(1, 10), max_size=3)
    action = st.one_of(
        st.tuples(st.just("write")),
        st.tuples(st.sampled_from(["check", "reload"]), st.integers(0, 3), points),
        st.tuples(st.just("start"), points),
    )
    cuts = st.lists(st.integers(1, len(NEW_TEXT) - 1), max_size=4)
    return st.tuples(cuts, st.lists(action, max_size=14))


@pytest.mark.parametrize("config", CONFIGS)
def test_no_interleaving_of_a_rewrite_with_polls_reloads_and_worker_starts_opens_a_closed_gate(
    config, monkeypatch
):
    """Every order of the writer's steps (open, pieces, close), and of polls, reloads and worker
    starts, with writer steps also made inside them at any of their reads: no store ever answers
    what no whole version of the file says, and each reads the new content once it is whole.
    Without leases, a worker started while the writer has the file open cannot know it (the
    documented limit): those interleavings are left out of "inotify only"."""
    import tempfile
    from pathlib import Path

    from hypothesis import HealthCheck, assume, given, settings

    from tests.conftest import REPORT
    from tests.interleave import Writer, during

    options = dict(CONFIGS[config])
    if options.pop("leases", True) is False:
        monkeypatch.setattr(writers, "_LEASES", False)
        with tempfile.TemporaryDirectory() as tmp:
            probe = FileStore(tmp, **options)
            if not _watched(probe):
                pytest.skip("no inotify here (or its per-user limit is reached)")
            probe.stop()
    explored = []

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
        ],
    )
    @given(_interleavings())
    def run(case):
        cuts, actions = case
        with tempfile.TemporaryDirectory() as tmp:
            gates_dir = Path(tmp)
            path = _team_file(gates_dir)
            writer = Writer(path, NEW_TEXT, [HALF, *cuts])
            stores = [FileStore(gates_dir, **options)]
            watched = config != "inotify only" or _watched(stores[0])
            try:
                # Without leases, inotify is all there is: a store that could not have it (the
                # user's limit on inotify instances is shared with every process) is left out.
                assume(watched)
                for action in actions:
                    if action[0] == "write":
                        writer.step()
                    elif action[0] == "start":
                        if config == "inotify only" and writer.mid_write:
                            continue
                        stores.append(during(writer, action[1], lambda: FileStore(gates_dir, **options)))
                        assume(config != "inotify only" or _watched(stores[-1]))
                    else:
                        store = stores[action[1] % len(stores)]
                        during(writer, action[2], store.check if action[0] == "check" else store.reload)
                    for number, store in enumerate(stores):
                        assert _wrong(store) is None, f"store {number} after {action}: {_wrong(store)}"
                writer.finish()
                for store in stores:
                    _settles(store)
                explored.append(len(actions))
            finally:
                writer.close()
                for store in stores:
                    store.stop()

    run()
    REPORT[f"rewrite interleavings explored ({config})"] = f"{len(explored)}, none opened a closed gate"


# -- any shape of YAML: one reported bad file, never a crash -----------------------------------

LIST_OF_FIVE = "apiVersion: v1\nkind: List\nitems: 5\n"


def test_a_list_whose_items_are_not_a_list_is_one_bad_file_and_the_others_are_read(gates_dir):
    (gates_dir / "list.yaml").write_text(LIST_OF_FIVE)
    team = write_gates(
        gates_dir, [gate("freeze", "team", default="closed"), gate("release", "team")], "team.yaml"
    )
    store = FileStore(gates_dir)  # it raised, and the worker failed to boot
    assert (
        "list.yaml is broken: document 1 is a List whose items are not a list"
        in store.problems[str(gates_dir / "list.yaml")]
    )
    assert not store.lookup("team", "freeze", NOW).open and store.lookup("team", "release", NOW).open
    # Reloads go on: closing a gate elsewhere takes effect.
    team.write_text(
        yaml.safe_dump_all(
            [gate("freeze", "team", default="closed"), gate("release", "team", default="closed")]
        )
    )
    until(
        lambda: (store.check(), store.lookup("team", "release", NOW).open)[1],
        lambda is_open: not is_open,
        timeout=10,
        interval=0,
    )
    assert not store.lookup("team", "release", NOW).open


def test_a_bad_list_added_to_a_directory_already_read_does_not_stop_the_reloads(gates_dir):
    team = write_gates(gates_dir, [gate("release", "team")], "team.yaml")
    store = FileStore(gates_dir)
    (gates_dir / "list.yaml").write_text(LIST_OF_FIVE)
    team.write_text(yaml.safe_dump_all([gate("release", "team", default="closed")]))
    until(
        lambda: (store.check(), store.lookup("team", "release", NOW).open)[1],
        lambda is_open: not is_open,
        timeout=10,
        interval=0,
    )
    assert not store.lookup("team", "release", NOW).open
    assert str(gates_dir / "list.yaml") in store.problems


ODD_DOCUMENTS = [
    "5",
    "just a string",
    "- a\n- b\n",
    "[1, 2]",
    "{}",
    "null",
    "~",
    "true",
    "1.5e300",
    ".nan",
    LIST_OF_FIVE,
    "kind: List\nitems: {kind: Gate, metadata: {name: x}}\n",
    "kind: List\nitems: [5, [1]]\n",
    "kind: GateList\nitems: 'text'\n",
    "kind: [Gate]\nmetadata: {name: x}\n",
    "kind: Gate\n",
    "kind: Gate\nmetadata: {name: [x]}\n",
    "kind: Gate\nmetadata: {name: x, namespace: 5}\n",
    "kind: Gate\nmetadata: {name: x, annotations: [a]}\n",
    "kind: Gate\nmetadata: {name: x, labels: {a: 1}}\n",
    "kind: Gate\nmetadata: {name: x, annotations: {open.gate.fluxcd.io/requestedAt: !!timestamp 2026-06-10T11:00:00Z}}\n",
    "kind: Gate\nmetadata: {name: x}\nspec: [closed]\n",
    "kind: Gate\nmetadata: {name: x}\nspec: {closed: [1], default: {a: b}, mode: [x], interval: 5, window: {}}\n",
    "kind: GateKeeper\nmetadata: {name: k}\nspec: {gate: [x]}\n",
    "kind: GateKeeper\nmetadata: {name: k}\nspec: 5\n",
    "kind: GateKeeper\nmetadata: {name: k}\nspec: {gate: x, timeZone: [x],\n"
    "  cronjob: {closed: [[1], {cron: [x]}, {cron: '* * * * *', duration: [1]}]}}\n",
    "kind: GateKeeper\nmetadata: {name: k}\nspec: {gate: x, type: [x], cronjob: 5}\n",
    "? [a, b]\n: c\n",
    "!!set {a, b}",
    "!!binary aGVsbG8=",
    "!!python/name:os.system",
    "!!omap [a: 1, b: 2]",
    "a: &a [x]\nb: *a\n",
    "&a [*a]",
    "kind: Gate\nmetadata: {name: !!binary eA==}\n",
    "\t- tab",
    "a: b: c",
    "'unterminated",
    "key: [unclosed",
    "%YAML 1.1\n%YAML 1.1\n---\na",
    "--- !<tag:x> {kind: Gate}",
    "[" * 3000 + "]" * 3000,
    "kind: Gate\nmetadata: {name: x}\n" + "x: " + "y" * 50_000 + "\n",
]


def _values():
    from hypothesis import strategies as st

    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=20)
        | st.sampled_from(
            [
                "Gate",
                "GateKeeper",
                "List",
                "flux-system",
                "closed",
                "opened",
                "* * * * *",
                "30s",
                "2026-06-10T11:00:00Z",
                "gating.toolkit.fluxcd.io/v1alpha1",
                "v1",
                "",
            ]
        )
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=8) | st.integers() | st.booleans(), inner, max_size=4)
        ),
        max_leaves=16,
    )


def _odd_documents():
    """Documents of every YAML shape: arbitrary values, and Gates, GateKeepers and Lists with
    any field of any type; dumped whole, cut anywhere, or hand-written oddities."""
    from hypothesis import strategies as st

    values = _values()
    metadata = st.one_of(
        values,
        st.fixed_dictionaries(
            {"name": st.just("x") | values},
            optional={"namespace": st.just("team") | values, "annotations": values, "labels": values},
        ),
    )
    spec = st.one_of(
        values,
        st.dictionaries(
            st.sampled_from(
                ["default", "closed", "interval", "window", "mode", "gate", "type", "timeZone", "cronjob"]
            ),
            values,
            max_size=5,
        ),
    )
    obj = st.fixed_dictionaries(
        {"kind": st.sampled_from(["Gate", "GateKeeper"]) | values},
        optional={
            "apiVersion": st.just("gating.toolkit.fluxcd.io/v1alpha1") | values,
            "metadata": metadata,
            "spec": spec,
        },
    )
    listed = st.fixed_dictionaries(
        {"kind": st.sampled_from(["List", "GateList"])},
        optional={"items": values | st.lists(obj | values, max_size=3)},
    )
    docs = st.lists(obj | listed | values, min_size=1, max_size=4)
    dumped = docs.map(lambda d: yaml.safe_dump_all(d, sort_keys=False))
    cut = st.tuples(dumped, st.floats(0, 1)).map(lambda t: t[0][: int(len(t[0]) * t[1])])
    return st.one_of(
        dumped,
        cut,
        st.sampled_from(ODD_DOCUMENTS),
        st.text(max_size=200),
        st.lists(st.sampled_from(ODD_DOCUMENTS), min_size=2, max_size=4).map("\n---\n".join),
    )


def test_any_yaml_document_in_the_gates_dir_is_one_reported_file_never_a_crash(tmp_path_factory):
    from hypothesis import HealthCheck, example, given, settings

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_odd_documents())
    @example(LIST_OF_FIVE)
    def run(text):
        gates_dir = tmp_path_factory.mktemp("odd")
        odd = gates_dir / "odd.yaml"
        odd.write_text(text)
        good = write_gates(
            gates_dir, [gate("freeze", "other", default="closed"), gate("release", "other")], "good.yaml"
        )
        store = FileStore(gates_dir)
        try:
            for where, why in store.problems.items():  # the file itself, or gates it defines twice
                assert where == str(odd) or "odd.yaml" in why, store.problems
            assert not store.lookup("other", "freeze", NOW).open  # never opened by another file
            store.index.states(NOW)  # every gate read evaluates
            store.readiness()
            # The other files are read again: closing a gate there takes effect.
            good.write_text(
                yaml.safe_dump_all(
                    [gate("freeze", "other", default="closed"), gate("release", "other", default="closed")]
                )
            )
            store.reload()
            assert not store.lookup("other", "release", NOW).open and str(good) not in store.problems
        finally:
            store.stop()

    run()


# -- a GateKeeper file that cannot be read: its gates are unknown, so closed ------------------


def test_a_gatekeeper_file_broken_at_start_closes_the_gates_it_may_schedule(gates_dir):
    write_gates(gates_dir, [gate("release", default="opened")], "gates.yaml")
    (gates_dir / "keepers.yaml").write_text(
        "kind: GateKeeper\nmetadata: {name: freeze, namespace: flux-system\n"
        "spec: {gate: release, cronjob: {closed: ['@always']}}\n"
    )
    store = FileStore(gates_dir)
    state = store.lookup("flux-system", "release", NOW)
    assert (state.open, state.reason) == (False, "Unknown"), state
    assert "gates file keepers.yaml is broken: invalid YAML at line" in state.message
    assert "it may define or schedule this gate" in state.message
    assert str(gates_dir / "keepers.yaml") in store.problems and store.readiness()[0]


def test_a_gatekeeper_naming_no_gate_closes_the_gates_of_its_namespace_only(gates_dir):
    write_gates(gates_dir, [gate("release", "team"), gate("release", "other")], "gates.yaml")
    write_gates(
        gates_dir,
        [
            {
                **keeper("freeze", "x", closed=["@always"], namespace="team"),
                "spec": {"gate": ["release"], "cronjob": {"closed": ["@always"]}},
            }
        ],
        "keepers.yaml",
    )
    store = FileStore(gates_dir)
    state = store.lookup("team", "release", NOW)
    assert (state.open, state.reason) == (False, "Unknown") and "names no gate (spec.gate)" in state.message
    assert store.lookup("other", "release", NOW).open  # what it may schedule is in namespace team


def test_a_broken_file_that_cannot_spell_a_gate_closes_nothing(gates_dir):
    write_gates(gates_dir, [gate("release")], "gates.yaml")
    (gates_dir / "values.yaml").write_text("replicas: 3\nimage: [unclosed\n")
    store = FileStore(gates_dir)
    assert str(gates_dir / "values.yaml") in store.problems
    assert store.lookup("flux-system", "release", NOW).open


def test_a_gatekeeper_file_broken_after_a_good_read_closes_the_gates_its_keepers_scheduled(gates_dir):
    write_gates(gates_dir, [gate("release", default="opened")], "gates.yaml")
    keepers = write_gates(gates_dir, [keeper("freeze", "release", closed=["@never"])], "keepers.yaml")
    store = FileStore(gates_dir)
    assert store.lookup("flux-system", "release", NOW).open
    good = keepers.read_text()
    keepers.write_text(
        good.replace("'@never'", "'@always'").replace("spec:", "spec: [", 1)
    )  # an edit gone wrong
    store.reload()
    state = store.lookup("flux-system", "release", NOW)
    assert (state.open, state.reason) == (
        False,
        "Invalid",
    ) and "gates file keepers.yaml is broken" in state.message
    keepers.write_text(good)
    store.reload()
    assert store.lookup("flux-system", "release", NOW).open


def test_a_gatekeeper_defined_in_two_files_closes_the_gates_both_schedule(gates_dir):
    write_gates(gates_dir, [gate("a"), gate("b")], "gates.yaml")
    write_gates(gates_dir, [keeper("freeze", "a", closed=["@always"])], "one.yaml")
    write_gates(gates_dir, [keeper("freeze", "b", closed=["@never"])], "two.yaml")
    store = FileStore(gates_dir)
    for name in ("a", "b"):
        state = store.lookup("flux-system", name, NOW)
        assert (state.open, state.reason) == (False, "Invalid")
        assert "gatekeeper flux-system/freeze is defined in both one.yaml and two.yaml" in state.message


# -- an idle directory costs (next to) nothing -------------------------------------------------


class _Listings:
    """Counts the directory listings (os.scandir) the store makes: the filesystem boundary."""

    def __init__(self, monkeypatch):
        import os

        self.count, real = 0, os.scandir

        def scandir(path="."):
            self.count += 1
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)


def _many_files(gates_dir, count=50):
    for i in range(count):
        sub = gates_dir / f"team-{i % 5}"
        sub.mkdir(exist_ok=True)
        write_gates(sub, [gate(f"g{i}", f"team-{i % 5}")], f"g{i}.yaml")


def test_an_idle_poll_lists_no_directory_and_reads_no_file(gates_dir, monkeypatch):
    _many_files(gates_dir)
    store = FileStore(gates_dir)
    if store._writes is None or store._writes.pending() is None:
        pytest.skip("no inotify here: every poll lists the directory")
    store.check()
    listings = _Listings(monkeypatch)
    for _ in range(5):
        assert store.check() is False
    assert listings.count == 0, "an idle poll listed the directory"
    # A change anywhere, even in a directory made after the store started, is still seen.
    (gates_dir / "late").mkdir()
    write_gates(gates_dir / "late", [gate("late", "team-0", default="closed")], "late.yaml")
    until(
        lambda: (store.check(), store.lookup("team-0", "late", NOW).reason)[1],
        lambda r: r == "Default",
        timeout=10,
        interval=0,
    )
    path = gates_dir / "late" / "late.yaml"
    path.write_text(path.read_text().replace("closed", "opened"))
    until(lambda: (store.check(), store.lookup("team-0", "late", NOW).open)[1], bool, timeout=10, interval=0)
    assert store.lookup("team-0", "late", NOW).open and listings.count > 0


def test_without_inotify_every_poll_lists_the_directory_and_sees_changes(gates_dir, monkeypatch):
    _many_files(gates_dir, 10)
    store = FileStore(gates_dir, inotify=False)
    listings = _Listings(monkeypatch)
    store.check()
    assert listings.count >= 6  # the directory and its five subdirectories
    path = gates_dir / "team-0" / "g0.yaml"
    path.write_text(path.read_text().replace("spec: {}", "spec: {default: closed}"))
    until(
        lambda: (store.check(), store.lookup("team-0", "g0", NOW).open)[1],
        lambda is_open: not is_open,
        timeout=10,
        interval=0,
    )
    assert not store.lookup("team-0", "g0", NOW).open


def test_the_directory_is_still_listed_whole_now_and_then(gates_dir, monkeypatch):
    _many_files(gates_dir, 10)
    store = FileStore(gates_dir, full_scan_interval=0)  # what inotify cannot see (a network file system)
    listings = _Listings(monkeypatch)
    store.check()
    assert listings.count >= 6


def test_the_calendars_snapshot_carries_the_gates_of_unknown_state(gates_dir):
    from admission.store.index import GateIndex, Unknowns

    write_gates(gates_dir, [gate("release")], "gates.yaml")
    (gates_dir / "keepers.yaml").write_text("kind: GateKeeper\nmetadata: {name: k, namespace: flux-system\n")
    gates, keepers, broken, unknown = FileStore(gates_dir).index.snapshot()
    index = GateIndex()  # as the calendar's builder process rebuilds it
    index.replace_all(
        gates,
        keepers,
        {(ns, n): why for ns, n, why in broken},
        Unknowns(gates={(ns, n): why for ns, n, why in unknown}),
    )
    state = index.lookup("flux-system", "release", NOW)
    assert (state.open, state.reason) == (False, "Unknown") and "keepers.yaml is broken" in state.message


# -- an entry that cannot be looked at: one broken file, the rest is read ---------------------


def _loop(path):
    """Make ``path`` a symlink to itself: stat() fails with ELOOP, for real, even as root."""
    import os

    path.unlink(missing_ok=True)
    os.symlink(path.name, path)


def _closed(store, name, namespace="flux-system"):
    return lambda: (store.check(), not store.lookup(namespace, name, NOW).open)[1]


def test_a_file_that_cannot_be_stated_closes_its_gates_and_the_others_are_still_read(gates_dir):
    release = write_gates(gates_dir, [gate("release")], "release.yaml")
    other = write_gates(gates_dir, [gate("other")], "other.yaml")
    store = FileStore(gates_dir)
    assert store.lookup("flux-system", "other", NOW).open
    _loop(other)
    store.reload()
    state = store.lookup("flux-system", "other", NOW)
    assert (state.open, state.reason) == (False, "Invalid"), state
    assert "other.yaml cannot be looked at" in state.message and "ELOOP" in state.message
    assert store.lookup("flux-system", "release", NOW).open  # what it never defined stays as read
    # Closing a gate by editing its own file is enforced while the broken entry stays.
    release.write_text(yaml.safe_dump_all([gate("release", default="closed")]))
    assert until(_closed(store, "release"), bool, timeout=10, interval=0)
    ready, detail = store.readiness()
    assert ready and "other.yaml cannot be looked at" in detail["problems"][str(other)]
    assert str(gates_dir) not in detail["problems"]  # the directory itself was read
    write_gates(gates_dir, [gate("other")], "other.yaml.new").rename(other)
    assert until(
        lambda: (store.check(), store.lookup("flux-system", "other", NOW).open)[1],
        bool,
        timeout=10,
        interval=0,
    )
    assert str(other) not in store.problems


def test_a_file_never_read_that_cannot_be_stated_may_define_any_gate(gates_dir):
    release = write_gates(gates_dir, [gate("release")], "release.yaml")
    store = FileStore(gates_dir)
    assert store.lookup("flux-system", "release", NOW).open
    _loop(gates_dir / "keepers.yaml")  # it may schedule any gate: no telling which
    assert until(_closed(store, "release"), bool, timeout=10, interval=0)
    state = store.lookup("flux-system", "release", NOW)
    assert state.reason == "Unknown" and "keepers.yaml cannot be looked at" in state.message
    # Edits made meanwhile are read: once the entry goes, the gates are what their files say now.
    release.write_text(yaml.safe_dump_all([gate("release"), gate("late")]))
    (gates_dir / "keepers.yaml").unlink()
    assert until(
        lambda: (store.check(), store.lookup("flux-system", "late", NOW).open)[1],
        bool,
        timeout=10,
        interval=0,
    )
    assert store.lookup("flux-system", "release", NOW).open and not store.problems


def _unlistable(monkeypatch, directory):
    """Make listing ``directory`` fail as it does for a server not running as root when the
    directory's mode forbids it (EACCES): as root (the tests) chmod cannot produce it, so it is
    stood in for at the filesystem boundary."""
    import os

    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == str(directory):
            raise PermissionError(13, "Permission denied", str(directory))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_subdirectory_that_cannot_be_listed_closes_what_it_may_define_and_the_rest_is_read(
    gates_dir, monkeypatch
):
    team = gates_dir / "team"
    team.mkdir()
    write_gates(team, [gate("release", "team")], "team.yaml")
    mine = write_gates(gates_dir, [gate("mine")], "mine.yaml")
    store = FileStore(gates_dir)
    assert store.lookup("team", "release", NOW).open and store.lookup("flux-system", "mine", NOW).open
    with monkeypatch.context() as denied:
        _unlistable(denied, team)
        store.reload()
        for namespace, name in (("team", "release"), ("flux-system", "mine")):  # it may schedule either
            state = store.lookup(namespace, name, NOW)
            assert not state.open and "team cannot be listed" in state.message, state
        assert "EACCES: Permission denied" in store.problems[str(team)]
        mine.write_text(yaml.safe_dump_all([gate("mine", default="closed")]))
        store.reload()
        assert str(gates_dir) not in store.problems  # the rest of the directory was read
    assert until(
        lambda: (store.check(), store.lookup("team", "release", NOW).open)[1], bool, timeout=10, interval=0
    )
    assert not store.lookup("flux-system", "mine", NOW).open  # the edit made meanwhile holds
    assert not store.problems


def test_a_gates_directory_that_cannot_be_listed_any_more_closes_every_gate(gates_dir, monkeypatch):
    write_gates(gates_dir, [gate("release")])
    store = FileStore(gates_dir)
    with monkeypatch.context() as denied:
        _unlistable(denied, gates_dir)
        store.reload()
        state = store.lookup("flux-system", "release", NOW)
        assert (state.open, state.reason) == (
            False,
            "Unknown",
        ) and "cannot be listed (EACCES" in state.message
        assert store.readiness()[0]  # its gates are closed and say why (docs/decisions/0032)
    assert until(
        lambda: (store.check(), store.lookup("flux-system", "release", NOW).open)[1],
        bool,
        timeout=10,
        interval=0,
    )
