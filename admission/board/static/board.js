// The gate board, when JavaScript runs: keep the page current (it polls the server's rendering
// of the same board; nothing is computed here), and confirm actions in a dialog. Without it, the
// page reads the same and actions confirm on a page of their own.
"use strict";
(function () {
  const PERIOD_MS = 1000;
  const board = document.getElementById("board");
  const dialog = document.getElementById("confirm");
  const status = document.getElementById("status");
  if (!board) return;
  // The fragment's ETag as the page was drawn: the first poll of an unchanged board swaps nothing.
  let etag = board.dataset.etag ? '"' + board.dataset.etag + '"' : null;
  let busy = false;

  function typing() {
    const active = document.activeElement;
    return (dialog && dialog.open) ||
      (active && board.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  async function refresh(force) {
    if (busy || (!force && typing())) return;
    busy = true;
    try {
      const headers = { "Accept": "text/html" };
      if (etag && !force) headers["If-None-Match"] = etag;
      const answer = await fetch(board.dataset.fragment, { headers: headers, cache: "no-store" });
      if (answer.status === 200) {
        const focused = document.activeElement && document.activeElement.id;
        // What the viewer typed or chose and has not sent yet survives the swap (ids are stable).
        const kept = {};
        board.querySelectorAll("input[id], select[id]").forEach(function (field) {
          if (field.type !== "hidden" && field.value !== "") kept[field.id] = field.value;
        });
        const opened = Array.from(board.querySelectorAll("details[id][open]")).map(function (d) { return d.id; });
        etag = answer.headers.get("ETag");
        board.innerHTML = await answer.text();
        Object.keys(kept).forEach(function (id) {
          const field = document.getElementById(id);
          if (field) field.value = kept[id];
        });
        opened.forEach(function (id) {
          const details = document.getElementById(id);
          if (details) details.open = true;
        });
        const again = focused && document.getElementById(focused);
        if (again) again.focus();
        board.dataset.updated = String(Date.now());
      }
    } catch (err) {
      // The board's server is gone or busy: the page stays as it was, and says so.
      status.textContent = "Not updated: " + err;
    } finally {
      busy = false;
    }
  }

  function ask(text) {
    return new Promise(function (resolve) {
      document.getElementById("confirm-text").textContent = text;
      dialog.returnValue = "";
      dialog.addEventListener("close", function () { resolve(dialog.returnValue === "confirm"); }, { once: true });
      dialog.showModal();
      document.getElementById("confirm-no").focus();
    });
  }

  board.addEventListener("submit", async function (event) {
    const form = event.target;
    if (!form.classList || !form.classList.contains("action")) return;
    event.preventDefault();
    const text = form.dataset.confirm;
    const trigger = document.activeElement;
    if (!(await ask(text))) { if (trigger) trigger.focus(); return; }
    const body = new URLSearchParams(new FormData(form));
    body.set("confirmed", "yes");
    status.className = "";
    status.textContent = "Working: " + text;
    try {
      const answer = await fetch(form.action, {
        method: "POST", body: body, headers: { "Accept": "application/json" },
      });
      const result = await answer.json();
      status.className = result.ok ? "done" : "refused";
      if (result.ok) form.reset();  // sent: what was typed in it is done with
      status.textContent = (result.ok ? "Done: " : "Refused: ") + result.lines.join("; ");
    } catch (err) {
      status.className = "refused";
      status.textContent = "Failed: " + err;
    }
    await refresh(true);
  });

  setInterval(function () { refresh(false); }, PERIOD_MS);
})();
