// fusee's web UI: the live part of each page, the status header, the buttons.
//
// - The element #live is the part of a page that follows the engine: every
//   data-poll-ms, the page's own URL is fetched again with part=live and the
//   part swapped in when it changed (details left open stay open).
// - The status header reads five samples of /metrics every second (name[]=...,
//   never the whole scrape): runs open, and from two readings steps and
//   fdatasyncs per second and the time per fdatasync. A figure without a number
//   yet is hidden, not shown as a dash.
// - Each [data-action] button or form asks for a confirmation (data-confirm)
//   and posts to the JSON API under /v1, the same operations as the CLI.
// - The start form (form[data-start]) posts POST /v1/runs and goes to the run.
// No library, nothing fetched from elsewhere.
"use strict";

(() => {
  const POLL_MS_DEFAULT = 1000;
  const STATS_MS = 1000;
  const STATS = [
    "fusee_runs_open",
    "fusee_steps_total",
    "fusee_fdatasync_total",
    "fusee_fdatasync_seconds_sum",
    "fusee_fdatasync_seconds_count",
  ];
  const STATS_URL = `/metrics?${STATS.map((name) => `name[]=${name}`).join("&")}`;

  // -- the live part --------------------------------------------------------------

  let lastLive = null;
  let refreshing = false;
  let again = false; // asked while a fetch was out: that one may predate an action

  function liveUrl() {
    const url = new URL(window.location.href);
    url.searchParams.set("part", "live");
    return url;
  }

  async function refresh() {
    const live = document.getElementById("live");
    if (!live) return;
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    try {
      const response = await fetch(liveUrl(), { cache: "no-store", credentials: "same-origin" });
      if (response.status === 401 || response.redirected) {
        window.location.reload(); // logged out: the login form
        return;
      }
      const text = await response.text();
      if (text !== lastLive) {
        lastLive = text;
        const template = document.createElement("template");
        template.innerHTML = text;
        const fresh = template.content.getElementById("live");
        if (fresh) swap(live, fresh);
      }
      document.body.classList.remove("offline");
    } catch (error) {
      document.body.classList.add("offline"); // the server is away: try again next time
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  // The fresh part replaces the old; details left open stay open, and what was typed
  // in a field marked data-keep (its form's data-key and its name) is kept.
  function swap(live, fresh) {
    const open = [...live.querySelectorAll("details")].map((d) => d.open);
    // (An open run's bars grow every second, so its part is swapped every second.)
    const typed = new Map();
    let focused = null;
    let caret = null;
    for (const field of live.querySelectorAll("[data-keep]")) {
      const key = `${field.form ? field.form.dataset.key : ""}/${field.name}`;
      if (field.value) typed.set(key, field.value);
      if (field === document.activeElement) {
        focused = key;
        caret = [field.selectionStart, field.selectionEnd];
      }
    }
    live.replaceChildren(...fresh.childNodes);
    live.querySelectorAll("details").forEach((d, i) => {
      if (open[i]) d.open = true;
    });
    for (const field of live.querySelectorAll("[data-keep]")) {
      const key = `${field.form ? field.form.dataset.key : ""}/${field.name}`;
      if (typed.has(key)) field.value = typed.get(key);
      if (key === focused) {
        field.focus();
        if (caret) field.setSelectionRange(caret[0], caret[1]);
      }
    }
  }

  // -- the status header ----------------------------------------------------------

  // "1 run", "2 runs", "0 runs": a count and its noun (html.counted, in Python).
  function counted(n, one, many) {
    return `${n} ${n === 1 ? one : many}`;
  }

  let previous = null;

  function parseMetrics(text) {
    const sums = {};
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const cut = line.lastIndexOf(" ");
      const name = line.slice(0, cut).split("{")[0];
      sums[name] = (sums[name] || 0) + Number(line.slice(cut + 1));
    }
    return sums;
  }

  // A figure is shown once it has a number; until then (or with none) it is hidden.
  function show(name, text) {
    const cell = document.querySelector(`[data-stat="${name}"]`);
    if (!cell) return;
    cell.textContent = text ?? "";
    cell.parentElement.hidden = text == null;
  }

  async function stats() {
    let now;
    try {
      const response = await fetch(STATS_URL, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) return;
      now = { at: performance.now(), m: parseMetrics(await response.text()) };
    } catch (error) {
      return;
    }
    const m = now.m;
    const open = m.fusee_runs_open ?? 0;
    show("runs_open", String(open));
    show("runs_open_word", open === 1 ? "run" : "runs");
    const syncTime = (sum, count) => (count > 0 ? `${((1000 * sum) / count).toFixed(2)} ms` : null);
    if (previous) {
      const seconds = (now.at - previous.at) / 1000;
      const rate = (name) => ((m[name] ?? 0) - (previous.m[name] ?? 0)) / seconds;
      show("steps_s", rate("fusee_steps_total").toFixed(0));
      // A store that never fdatasyncs (PostgreSQL) has no such figure: none is shown.
      const syncs = m.fusee_fdatasync_total !== undefined;
      show("syncs_s", syncs ? rate("fusee_fdatasync_total").toFixed(0) : null);
      const count = (m.fusee_fdatasync_seconds_count ?? 0) - (previous.m.fusee_fdatasync_seconds_count ?? 0);
      const sum = (m.fusee_fdatasync_seconds_sum ?? 0) - (previous.m.fusee_fdatasync_seconds_sum ?? 0);
      show(
        "sync_ms",
        count > 0 ? syncTime(sum, count) : syncTime(m.fusee_fdatasync_seconds_sum, m.fusee_fdatasync_seconds_count),
      );
    }
    previous = now;
  }

  // -- the buttons ----------------------------------------------------------------

  // The banner: `text`, then a link (`[href, text]`) if given. It says what was done,
  // never a run's status, which the live part shows as it stands.
  function say(text, bad, link) {
    const out = document.getElementById("flash");
    if (!out) return;
    out.textContent = text;
    if (link) {
      const a = document.createElement("a");
      a.href = link[0];
      a.textContent = link[1];
      out.append(a);
    }
    out.className = bad ? "flash bad" : "flash ok";
    out.hidden = false;
  }

  // The run the page shows, as its live part says now (not as the page first loaded:
  // on /runs/ID that changes when the id gets a new run). An act names it (run_id), so
  // one confirmed after another client reset the run is refused, not sent to the new run.
  function shownRun() {
    const state = document.getElementById("run-state");
    return state ? state.dataset.run || "" : "";
  }

  function target(action, data) {
    const heading = document.querySelector("[data-run-id]");
    const run = heading ? `/v1/runs/${encodeURIComponent(heading.dataset.runId)}` : "";
    const name = encodeURIComponent(data.name || "");
    const shown = shownRun();
    const pin = shown ? `?run_id=${encodeURIComponent(shown)}` : "";
    switch (action) {
      case "cancel":
      case "terminate":
      case "resume":
        return [`${run}/${action}${pin}`, "{}"];
      case "reset":
        return [`${run}/reset${pin}`, JSON.stringify({ to: Number(data.to) })];
      case "signal":
        return [`${run}/signals/${name}${pin}`, data.value];
      case "query":
        return [`${run}/queries/${name}`, data.value];
      default: // pause, unpause, trigger
        return [`/v1/schedules/${encodeURIComponent(data.schedule)}/${action}`, "{}"];
    }
  }

  async function act(action, data) {
    const [path, body] = target(action, data);
    let response;
    try {
      response = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body,
        credentials: "same-origin",
      });
    } catch (error) {
      say(`${action}: the server did not answer (${error.message})`, true);
      return;
    }
    const doc = await response.json().catch(() => null);
    if (!response.ok) {
      const why = doc && doc.error ? doc.error.message : `HTTP ${response.status}`;
      say(`${action} refused: ${why}`, true);
    } else if (action === "query") {
      say(`${data.name} = ${JSON.stringify(doc.result, null, 2)}`, false);
    } else if (action === "reset" && doc && doc.run_id) {
      // Its status would be stale by the time it shows (the new run goes on at once): the
      // page's facts say it.
      const heading = document.querySelector("[data-run-id]");
      const id = heading ? heading.dataset.runId : doc.id;
      const href = `/runs/${encodeURIComponent(id)}?run=${encodeURIComponent(doc.run_id)}`;
      say("reset: done; the new run is ", false, [href, doc.run_id]);
    } else {
      say(`${action}: done`, false);
    }
    lastLive = null;
    refresh();
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button || button.form) return;
    event.preventDefault();
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    act(button.dataset.action, button.dataset);
  });

  async function post(path, body) {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    const doc = await response.json().catch(() => null);
    if (!response.ok) throw new Error(doc && doc.error ? doc.error.message : `HTTP ${response.status}`);
    return doc;
  }

  // Act on every run the filter matches: count them (a dry run), ask, start a batch, and
  // go to its page, which follows its progress. The fields of a signal or a reset show
  // when that act is chosen.
  document.addEventListener("change", (event) => {
    const select = event.target.closest("form[data-batch] select[name=action]");
    if (!select) return;
    select.form.querySelectorAll("[data-for]").forEach((label) => {
      label.hidden = label.dataset.for !== select.value;
    });
  });

  function batchOf(form) {
    const action = form.elements.action.value;
    const where = [...form.querySelectorAll("input[name=where]")].map((input) => input.value);
    const batch = { action, status: form.dataset.status || null, workflow: form.dataset.workflow || null };
    if (where.length) batch.where = where;
    const rate = form.elements.rate.value.trim();
    if (rate) batch.rate = Number(rate);
    if (action === "signal") {
      batch.signal = form.elements.signal.value.trim();
      batch.value = JSON.parse(form.elements.value.value.trim() || "null");
    }
    if (action === "reset") {
      const to = form.elements.to.value.trim();
      batch.to = /^[0-9]+$/.test(to) ? Number(to) : to;
    }
    return batch;
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-batch]");
    if (!form) return;
    event.preventDefault();
    if (form.dataset.prefix) {
      say("a batch takes the status, workflow and attribute filters, not an id prefix", true);
      return;
    }
    let batch;
    try {
      batch = batchOf(form);
    } catch (error) {
      say(`the value is not JSON: ${error.message}`, true);
      return;
    }
    try {
      const dry = await post("/v1/batches", { ...batch, dry_run: true });
      if (!window.confirm(`${batch.action} ${counted(dry.count, "run", "runs")} matching this filter, each once?`)) return;
      const started = await post("/v1/batches", batch);
      window.location.assign(`/batches/${encodeURIComponent(started.id)}`);
    } catch (error) {
      say(`batch refused: ${error.message}`, true);
    }
  });

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-action]");
    if (!form) return;
    event.preventDefault();
    const action = form.dataset.action;
    const name = form.elements.name.value.trim();
    const value = form.elements.value.value.trim() || "null";
    try {
      JSON.parse(value);
    } catch (error) {
      say(`the value is not JSON: ${error.message}`, true);
      return;
    }
    const heading = document.querySelector("[data-run-id]");
    const question = `Send signal "${name}" with ${value} to run ${heading.dataset.runId}?`;
    if (action === "signal" && !window.confirm(question)) return;
    act(action, { name, value });
  });

  // Complete a step that waits for its completion: its token's URL, with the JSON value.
  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-complete]");
    if (!form) return;
    event.preventDefault();
    const text = form.elements.value.value.trim() || "null";
    try {
      JSON.parse(text);
    } catch (error) {
      say(`the value is not JSON: ${error.message}`, true);
      return;
    }
    if (!window.confirm(`Complete step "${form.dataset.step}" with ${text}?`)) return;
    try {
      const response = await fetch(`/v1/complete/${encodeURIComponent(form.dataset.token)}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: text,
        credentials: "same-origin",
      });
      const doc = await response.json().catch(() => null);
      if (!response.ok) throw new Error(doc && doc.error ? doc.error.message : `HTTP ${response.status}`);
      say(`complete: done (step ${form.dataset.step})`, false);
    } catch (error) {
      say(`complete refused: ${error.message}`, true);
    }
    lastLive = null;
    refresh();
  });

  // -- starting a run -------------------------------------------------------------

  // The picker shows what the chosen workflow takes, and its example input while the
  // field still holds the last example (what was typed is kept).
  document.addEventListener("change", (event) => {
    const select = event.target.closest("form[data-start] select[name=workflow]");
    if (!select) return;
    const form = select.form;
    let example = null;
    let was = null;
    form.querySelectorAll(".wf-about").forEach((about) => {
      if (!about.hidden) was = about.dataset.example;
      about.hidden = about.dataset.workflow !== select.value;
      if (!about.hidden) example = about.dataset.example;
    });
    const input = form.elements.input;
    if (example !== null && (input.value.trim() === "" || input.value === was)) input.value = example;
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-start]");
    if (!form) return;
    event.preventDefault();
    const text = form.elements.input.value.trim() || "null";
    let input;
    try {
      input = JSON.parse(text);
    } catch (error) {
      say(`the input is not JSON: ${error.message}`, true);
      return;
    }
    const body = { workflow: form.elements.workflow.value, input };
    const id = form.elements.id.value.trim();
    if (id) body.id = id;
    try {
      const run = await post("/v1/runs", body);
      window.location.assign(`/runs/${encodeURIComponent(run.id)}?run=${encodeURIComponent(run.run_id)}`);
    } catch (error) {
      say(`start refused: ${error.message}`, true);
    }
  });

  // -- start ----------------------------------------------------------------------

  const live = document.getElementById("live");
  const pollMs = Number(live && live.dataset.pollMs) || POLL_MS_DEFAULT;
  if (live) {
    lastLive = null;
    setInterval(() => {
      if (!document.hidden) refresh();
    }, pollMs);
  }
  stats();
  setInterval(() => {
    if (!document.hidden) stats();
  }, STATS_MS);
})();
