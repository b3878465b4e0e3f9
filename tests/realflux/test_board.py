"""The gate board in a real browser (Debian's chromium, driven by chromedriver through selenium):
`kubectl gate board` run as alice against the real API server with our webhooks, the real
source-controller holding a commit behind a closed gate. A click approves exactly what the page
shows, as alice (the API server authenticates her; our webhook stamps her), the commit lands and
the page follows without a reload; the same by keyboard alone; a gate message carrying markup
renders as text; a page that reaches the board under another name (DNS rebinding) is refused;
an action the API server refuses is shown in its words. (alice is cluster-admin in this plane:
what she approves is hers either way; the API server's refusal here is a gate deleted meanwhile.)

Screenshots are saved in $FGA_ARTEFACTS (else build/artefacts) as test artefacts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from admission.core.base import names
from tests.conftest import REPORT
from tests.e2e.controlplane import ALICE, ROOT
from tests.polling import until
from tests.processes import BIN
from tests.realflux.test_approvals import blocked_waits, git_setup, written
from tests.realflux.test_kustomization import manifests

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTEFACTS = Path(os.environ.get("FGA_ARTEFACTS") or ROOT / "build" / "artefacts")
REBOUND = "rebound.example"  # a name the browser resolves to 127.0.0.1, as a rebinding attacker's would
PAGE_TIMEOUT = 60  # seconds for what the page shows to follow the cluster

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver (hack/test.sh installs them for this tier)",
)


class Board:
    """`kubectl gate board` run as alice: the URL it prints, stopped at the end."""

    def __init__(self, cluster):
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(cluster.plane.kubeconfig(ALICE)),
        }
        self.proc = subprocess.Popen(
            [cluster.plane.kubectl_path, "gate", "board", "-n", cluster.namespace],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline()  # the first line names the URL; it exits if it cannot serve
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, (
            f"kubectl gate board said {line!r}, stderr: {self.proc.stderr.read() if not found else ''}"
        )
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}/?namespace={cluster.namespace}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def board(cluster):
    running = Board(cluster)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # as root in a container, chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def screenshot(browser, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"board-{name}.png"
    browser.save_screenshot(str(path))
    REPORT[f"gate board screenshot ({name})"] = str(path)
    return path


def page_until(browser, accept, what: str, timeout: float = PAGE_TIMEOUT):
    """Poll the page as it is (never reloading it) until ``accept(browser)``; fail saying ``what``."""
    from selenium.common.exceptions import WebDriverException

    def look():
        try:
            return accept(browser)
        except WebDriverException:  # an element swapped out mid-read, or not there yet: look again
            return None

    found = until(look, bool, timeout=timeout, interval=0.2)
    if not found:
        screenshot(browser, "timeout-" + re.sub(r"\W+", "-", what)[:40])
        pytest.fail(f"the page did not show {what} within {timeout}s")
    return found


def act(browser, do, what: str) -> None:
    """Find and use an element as one step, taken again when the page's live update swapped the
    element out between finding and using it (a reference to it goes stale then)."""
    page_until(browser, lambda b: do(b) or True, what)


def held_row(browser, target: str):
    from selenium.webdriver.common.by import By

    for row in browser.find_elements(By.CSS_SELECTOR, "table.held tbody tr"):
        if row.find_element(By.TAG_NAME, "th").text == target:
            return row
    return None


def mark_page(browser) -> None:
    """A value a reload would lose: its survival shows the page updated in place."""
    browser.execute_script("window.boardMarker = 'still the same page';")


def same_page(browser) -> bool:
    return browser.execute_script("return window.boardMarker") == "still the same page"


def weekend_freeze(cluster) -> None:
    """A gate closed at weekends and nightly, as a GateKeeper in Berlin time says: the timeline's
    material (and the README's screenshot's)."""
    cluster.apply(
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "Gate",
            "metadata": {"name": "weekend"},
            "spec": {"default": "opened"},
        },
        {
            "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
            "kind": "GateKeeper",
            "metadata": {"name": "weekend-keeper"},
            "spec": {
                "gate": "weekend",
                "type": "cronexpression",
                "timeZone": "Europe/Berlin",
                "cronjob": {"closed": [{"cron": "0 18 * * 5", "duration": "62h"}, "* 22-23 * * 1-4"]},
            },
        },
    )


def committed_and_held(cluster, git):
    ns = cluster.namespace
    repo, first = git_setup(cluster, git)
    second = repo.commit(manifests(ns, "2"), "version 2")
    cluster.wait(lambda: blocked_waits(cluster, "gitrepository", "apps"), lambda m: second in m)
    assert second in blocked_waits(cluster, "gitrepository", "apps")
    return first, second


def lands(cluster, revision: str) -> None:
    landed = cluster.wait(
        lambda: cluster.get("gitrepository", "apps"),
        lambda g: (g.get("status") or {}).get("artifact", {}).get("revision") == revision,
    )
    assert landed["status"]["artifact"]["revision"] == revision


def test_a_click_approves_the_held_commit_as_the_user_and_the_page_follows(cluster, git, board, browser):
    from selenium.webdriver.common.by import By

    ns = cluster.namespace
    first, second = committed_and_held(cluster, git)
    weekend_freeze(cluster)
    target = f"GitRepository/{ns}/apps"
    browser.get(board.url)
    gate_row = browser.find_element(By.ID, f"gate-{ns}/freeze").find_element(By.XPATH, "..")
    assert "closed" in gate_row.text and "CloseRequested" in gate_row.text
    row = page_until(browser, lambda b: held_row(b, target), f"{target} held")
    assert second in row.text and first in row.text
    mark_page(browser)
    screenshot(browser, "held")

    row.find_element(By.CSS_SELECTOR, "form.action input[name=message]").send_keys("CHG-42 from the board")
    message_id = row.find_element(By.CSS_SELECTOR, "form.action input[name=message]").get_attribute("id")
    # The page updates under a message typed and not sent yet, and keeps it.
    browser.execute_script("document.activeElement.blur()")
    annotate = ("annotate", "--overwrite", "gate", "freeze", "-n", ns)
    cluster.plane.kubectl(*annotate, f"{names.MESSAGE_ANNOTATION}=release freeze, week 48")
    page_until(
        browser, lambda b: "release freeze, week 48" in b.find_element(By.ID, "board").text, "the new message"
    )
    assert browser.find_element(By.ID, message_id).get_attribute("value") == "CHG-42 from the board"
    act(
        browser,
        lambda b: (
            held_row(b, target)
            .find_element(By.CSS_SELECTOR, "form.action[action$='/actions/approve'] button")
            .click()
        ),
        "the approve button",
    )
    dialog = browser.find_element(By.ID, "confirm")
    page_until(browser, lambda b: dialog.get_attribute("open") is not None, "the confirmation dialog")
    # The confirmation names exactly what is approved, for what, behind which gate.
    assert browser.find_element(By.ID, "confirm-text").text.startswith(
        f"Approve {second} for {target} behind gate {ns}/freeze"
    )
    screenshot(browser, "confirm")
    browser.find_element(By.ID, "confirm-yes").click()

    status = page_until(
        browser, lambda b: b.find_element(By.ID, "status").text.startswith("Done"), "the approval done"
    )
    assert status
    assert [(a["content"], a["for"], a["by"], a["message"]) for a in written(cluster)] == [
        (second, target, ALICE.name, "CHG-42 from the board")
    ]
    lands(cluster, second)
    # Without a reload, the row goes once nothing waits any more.
    page_until(browser, lambda b: held_row(b, target) is None, "the landed commit gone from Held")
    assert same_page(browser)
    screenshot(browser, "landed")


def test_the_timeline_is_the_freeze_calendar_and_shows_suspend_windows(cluster, board, browser):
    from selenium.webdriver.common.by import By

    ns = cluster.namespace
    weekend_freeze(cluster)
    hour = (datetime.now(UTC) + timedelta(hours=3)).hour  # a window that is not active now
    cluster.apply(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {
                "name": "nightly",
                "annotations": {names.SUSPEND_DURING_ANNOTATION: f"* {hour} * * *"},
            },
            "spec": {
                "interval": "10m",
                "path": "./",
                "prune": False,
                "sourceRef": {"kind": "GitRepository", "name": "none"},
            },
        }
    )
    browser.get(board.url + "&tz=gate")
    spans = page_until(
        browser,
        lambda b: b.execute_script(
            """return Array.from(document.querySelectorAll("table.spans tbody tr"))
                 .filter(r => r.querySelector("th").textContent === arguments[0])
                 .map(r => [r.cells[1].textContent].concat(
                     Array.from(r.querySelectorAll("time")).map(t => t.getAttribute("datetime"))))""",
            f"gate {ns}/weekend",
        ),
        "the weekend gate's spans",
    )
    calendar = cluster.gate("calendar", "-n", ns, "-o", "json")
    assert calendar.returncode == 0, calendar.stderr
    [weekend] = [c for c in json.loads(calendar.stdout) if c["name"] == "weekend"]
    words = {names.STATE_OPENED: "open", names.STATE_CLOSED: "closed", names.REASON_UNKNOWN: "unknown"}
    assert spans == [[words[i["state"]], i["start"], i["end"]] for i in weekend["intervals"]]
    assert sum(1 for s in spans if s[0] == "closed") >= 4  # two weeks of weekends and weeknights
    # Focus on a closed span says what it is, as hover does (read in one go: the page may swap).
    label, title = browser.execute_script(
        """const span = document.querySelector(`svg[aria-label='gate ${arguments[0]}'] rect.span.closed`);
           return [span.getAttribute("aria-label"), span.querySelector("title").textContent];""",
        f"{ns}/weekend",
    )
    assert label.startswith("closed from ") and label == title
    assert "weekend-keeper" in title

    suspended = browser.execute_script(
        """return Array.from(document.querySelectorAll("table.spans tbody tr"))
             .filter(r => r.querySelector("th").textContent === arguments[0]).length""",
        f"Kustomization/{ns}/nightly",
    )
    assert suspended == 14  # one window a day, for the 14 days shown
    screenshot(browser, "timeline")

    # The table a reader opened stays open while the page follows a change.
    act(browser, lambda b: b.find_element(By.CSS_SELECTOR, "#timeline-table summary").click(), "the table")
    mark_page(browser)
    assert cluster.gate("close", "weekend", "-n", ns, "-m", "closed by hand too").returncode == 0
    page_until(browser, lambda b: "closed by hand too" in b.find_element(By.ID, "board").text, "the toggle")
    assert browser.find_element(By.ID, "timeline-table").get_attribute("open") is not None
    assert same_page(browser)


def test_keyboard_alone_approves_and_the_dialog_is_reachable(cluster, git, board, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ns = cluster.namespace
    _, second = committed_and_held(cluster, git)
    target = f"GitRepository/{ns}/apps"
    browser.get(board.url)
    row = page_until(browser, lambda b: held_row(b, target), f"{target} held")
    message = row.find_element(By.CSS_SELECTOR, "form.action[action$='/actions/approve'] input[name=message]")
    button = row.find_element(By.CSS_SELECTOR, "form.action[action$='/actions/approve'] button")
    wanted_message, wanted_button = message.get_attribute("id"), button.get_attribute("id")
    keys = ActionChains(browser)

    def tab_to(ident: str) -> None:
        for _ in range(200):  # every control on the page, at most
            if browser.execute_script("return document.activeElement.id") == ident:
                return
            keys.send_keys(Keys.TAB).perform()
        pytest.fail(f"Tab never reached #{ident}")

    browser.execute_script("document.activeElement.blur()")  # from the top, as a keyboard user starts
    tab_to(wanted_message)
    keys.send_keys("CHG-43 by keyboard").perform()
    tab_to(wanted_button)
    keys.send_keys(Keys.ENTER).perform()
    # The dialog takes focus on Cancel (the safe choice); Shift+Tab reaches Confirm.
    page_until(
        browser,
        lambda b: b.execute_script("return document.activeElement.id") == "confirm-no",
        "focus in the dialog",
    )
    keys.key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
    assert browser.execute_script("return document.activeElement.id") == "confirm-yes"
    keys.send_keys(Keys.ENTER).perform()
    page_until(
        browser, lambda b: b.find_element(By.ID, "status").text.startswith("Done"), "the approval done"
    )
    assert [(a["content"], a["by"], a["message"]) for a in written(cluster)] == [
        (second, ALICE.name, "CHG-43 by keyboard")
    ]
    lands(cluster, second)


def test_markup_in_a_message_is_text_and_the_api_servers_refusal_is_shown(cluster, board, browser):
    from selenium.webdriver.common.by import By

    ns = cluster.namespace
    hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    for name in ("freeze", "hotfix"):
        cluster.apply(
            {
                "apiVersion": "gating.toolkit.fluxcd.io/v1alpha1",
                "kind": "Gate",
                "metadata": {"name": name},
                "spec": {"default": "opened"},
            }
        )
    assert cluster.gate("close", "freeze", "-n", ns, "-m", hostile).returncode == 0
    browser.get(board.url)
    gate_row = page_until(
        browser,
        lambda b: b.find_element(By.ID, f"gate-{ns}/freeze").find_element(By.XPATH, ".."),
        "the gate",
    )
    assert hostile in gate_row.text  # shown as the characters it is made of
    assert browser.execute_script("return window.pwned") is None
    assert len(browser.find_elements(By.CSS_SELECTOR, "main script, main img")) == 0
    mark_page(browser)
    screenshot(browser, "markup")

    # Opening freeze as alice: written by her, and the page follows without a reload.
    def open_with_message(b) -> None:
        row = b.find_element(By.ID, f"gate-{ns}/freeze").find_element(By.XPATH, "..")
        form = row.find_element(By.CSS_SELECTOR, "form.action[action$='/actions/open']")
        field = form.find_element(By.CSS_SELECTOR, "input[name=message]")
        field.clear()  # taken again after a swap: what was typed survives the update
        field.send_keys("release train")
        form.find_element(By.CSS_SELECTOR, "button").click()

    act(browser, open_with_message, "the open button")
    page_until(
        browser, lambda b: b.find_element(By.ID, "confirm").get_attribute("open") is not None, "dialog"
    )
    browser.find_element(By.ID, "confirm-yes").click()
    page_until(
        browser,
        lambda b: (
            "open" in b.find_element(By.ID, f"gate-{ns}/freeze").find_element(By.XPATH, "..").text.split()
        ),
        "freeze open",
    )
    assert same_page(browser)
    annotations = cluster.get("gate", "freeze")["metadata"]["annotations"]
    assert annotations[names.MESSAGE_ANNOTATION] == "release train"

    # hotfix is deleted while the dialog asks: the API server refuses, and the page says so in its words.
    act(
        browser,
        lambda b: (
            b.find_element(By.ID, f"gate-{ns}/hotfix")
            .find_element(By.XPATH, "..")
            .find_element(By.CSS_SELECTOR, "form.action[action$='/actions/close'] button")
            .click()
        ),
        "hotfix's close button",
    )
    page_until(
        browser, lambda b: b.find_element(By.ID, "confirm").get_attribute("open") is not None, "dialog"
    )
    cluster.plane.kubectl("delete", "gate", "hotfix", "-n", ns)
    browser.find_element(By.ID, "confirm-yes").click()
    refusal = page_until(
        browser,
        lambda b: (t := b.find_element(By.ID, "status").text).startswith("Refused") and t,
        "the refusal",
    )
    assert refusal == 'Refused: gates.gating.toolkit.fluxcd.io "hotfix" not found'
    assert cluster.get("gate", "hotfix") == {}
    screenshot(browser, "refused")


def test_a_page_reaching_the_board_under_another_name_is_refused(cluster, board, browser):
    from selenium.webdriver.common.by import By

    # The browser resolves the name to 127.0.0.1, as after a DNS rebinding: same port, foreign Host.
    browser.get(f"http://{REBOUND}:{board.port}/")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert body.startswith("refused: this board answers only"), body
    assert "Gate board" not in browser.title
