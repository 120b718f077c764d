/* lakewrap operations page: reads the API of `lakewrap serve`, queues backfills with POST /runs.
   Hand-written, no dependencies, nothing from the network; every value goes into the page as text. */
"use strict";

const TOKEN_KEY = "lakewrap-api-token";
const FINAL = ["succeeded", "failed", "cancelled"];
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c === null || c === undefined ? "" : (c instanceof Node ? c : String(c)));
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : "HTTP " + status);
    this.status = status;
    this.hint = body && body.hint;
  }
}

async function api(method, path, body) {
  const headers = {"Accept": "application/json"};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (response.status === 401) { $("token-form").hidden = false; }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function say(text) { $("status").textContent = text; }

/* --- models: one calendar strip each ------------------------------------------------------------ */
function strip(model) {
  const row = el("div", {"class": "strip", "data-target": model.target});
  for (const cell of model.strip.cells) {
    row.append(el("span", {"class": "cell " + cell.state, "title": cell.value + ": " + cell.state,
                           "data-partition": cell.value, "data-state": cell.state}));
  }
  if (model.strip.later_gaps) {
    row.append(el("span", {"class": "later muted"}, "+" + model.strip.later_gaps + " gaps to " + model.strip.last_gap));
  }
  return row;
}

async function loadModels() {
  const data = await api("GET", "/models");
  const box = $("models");
  box.replaceChildren();
  for (const m of data.models) {
    const facts = m.partitions + " partitions, " + m.gaps + " gaps, " + m.stale + " stale, " +
      m.failed_partitions.length + " failed; last run " + (m.last_run || "never");
    box.append(el("div", {"class": "model", "data-target": m.target},
      el("div", {"class": "model-head"}, el("strong", {}, m.target), " ", el("span", {"class": "muted"}, m.strategy),
         " ", el("span", {"class": "muted facts"}, facts)),
      m.strip.cells.length ? strip(m) : el("div", {"class": "muted"}, "unpartitioned")));
  }
}

/* --- runs, their steps and log ------------------------------------------------------------------- */
async function showRun(runId) {
  const [run, logs] = await Promise.all([api("GET", "/runs/" + encodeURIComponent(runId)),
                                         api("GET", "/runs/" + encodeURIComponent(runId) + "/logs")]);
  $("run-title").textContent = "Run " + run.run.run_id + " (" + run.run.status + ")";
  const body = $("steps").tBodies[0];
  body.replaceChildren();
  for (const s of run.steps) {
    body.append(el("tr", {"class": "step " + s.status}, el("td", {}, s.step), el("td", {}, s.target),
      el("td", {}, s.partition || "-"), el("td", {}, s.status), el("td", {}, s.attempts),
      el("td", {}, s.rows_inserted), el("td", {}, s.rows_updated), el("td", {}, s.rows_deleted),
      el("td", {}, s.seconds === null ? "" : Number(s.seconds).toFixed(2)), el("td", {"class": "error"}, s.error || "")));
  }
  $("logs").textContent = logs.lines.map((l) => l.logged_at + " " + l.level + " " +
    (l.target ? l.target + (l.partition ? " " + l.partition : "") + ": " : "") + l.message).join("\n");
  $("run-detail").hidden = false;
  $("run-detail").dataset.run = runId;
}

async function loadRuns() {
  const data = await api("GET", "/runs?limit=20");
  const body = $("runs").tBodies[0];
  body.replaceChildren();
  for (const r of data.runs) {
    const open = el("button", {"type": "button", "class": "show-run", "data-run": r.run_id}, "steps & log");
    open.addEventListener("click", () => showRun(r.run_id).catch(report));
    body.append(el("tr", {"class": "run " + r.status, "data-run": r.run_id}, el("td", {}, r.run_id),
      el("td", {}, r.command), el("td", {"class": "run-status"}, r.status), el("td", {}, r.started_at),
      el("td", {}, r.steps), el("td", {}, r.succeeded), el("td", {}, r.failed), el("td", {}, open)));
  }
}

/* --- the backfill form ------------------------------------------------------------------------------ */
const DAY = /^\d{4}-\d{2}-\d{2}$/;

function chunks(start, end, n) {
  /* [start, end] of daily values split into n contiguous ranges (fewer when there are fewer days) */
  if (n <= 1 || !DAY.test(start) || !DAY.test(end)) return [[start, end]];
  const t0 = Date.parse(start + "T00:00:00Z"), t1 = Date.parse(end + "T00:00:00Z");
  if (!(t1 >= t0)) return [[start, end]];
  const days = Math.round((t1 - t0) / 86400000) + 1, per = Math.ceil(days / n), out = [];
  for (let i = 0; i < days; i += per) {
    const a = new Date(t0 + i * 86400000), b = new Date(t0 + Math.min(i + per - 1, days - 1) * 86400000);
    out.push([a.toISOString().slice(0, 10), b.toISOString().slice(0, 10)]);
  }
  return out;
}

function jobRow(job, range) {
  const row = el("tr", {"class": "job", "data-job": job.job_id}, el("td", {}, job.job_id), el("td", {}, range),
    el("td", {"class": "job-status"}, job.status), el("td", {"class": "job-run"}), el("td", {"class": "job-steps"}));
  $("jobs").tBodies[0].append(row);
  $("jobs").hidden = false;
  return row;
}

async function follow(jobId, row) {
  for (;;) {
    const job = await api("GET", "/jobs/" + jobId);
    row.querySelector(".job-status").textContent = job.status + (job.error ? ": " + job.error : "");
    row.className = "job " + job.status;
    if (job.run_id) row.querySelector(".job-run").textContent = job.run_id;
    if (FINAL.includes(job.status)) {
      if (job.run_id) {
        try {
          const run = await api("GET", "/runs/" + encodeURIComponent(job.run_id));
          row.querySelector(".job-steps").textContent = run.run.succeeded + " of " + run.run.steps + " succeeded";
        } catch (e) { /* a run that never reached the run log */ }
      }
      return job;
    }
    await new Promise((done) => setTimeout(done, 500));
  }
}

async function backfill(event) {
  event.preventDefault();
  const error = $("backfill-error");
  error.hidden = true;
  const select = $("select").value.split(/[\s,]+/).filter(Boolean);
  const start = $("start").value.trim(), end = $("end").value.trim();
  const ranges = chunks(start, end, parseInt($("workers").value, 10) || 1);
  const followed = [];
  try {
    for (const [a, b] of ranges) {
      const job = await api("POST", "/runs", {select, start: a, end: b});
      followed.push(follow(job.job_id, jobRow(job, a + " .. " + b)));
    }
  } catch (e) {
    error.textContent = e.message + (e.hint ? " (" + e.hint + ")" : "");
    error.hidden = false;
  }
  const done = await Promise.all(followed);
  if (done.length) {
    say(done.filter((j) => j.status === "succeeded").length + " of " + done.length + " backfill jobs succeeded");
    await refresh();
  }
}

function report(e) { say("error: " + e.message + (e.hint ? " (" + e.hint + ")" : "")); }

async function refresh() {
  try {
    await Promise.all([loadRuns(), loadModels()]);
    $("token-form").hidden = true;
    document.body.dataset.loaded = String(Date.now());
  } catch (e) { report(e); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("backfill").addEventListener("submit", (e) => { backfill(e).catch(report); });
  $("refresh").addEventListener("click", () => { refresh(); });
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    refresh();
  });
  refresh();
});
