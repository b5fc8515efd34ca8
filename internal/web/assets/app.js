// gpuslice dashboard: plain JavaScript, no dependencies. Everything shown
// comes from the API with the token kept in session storage; the page
// itself holds no data. Live: the event stream (read with fetch, which can
// send the bearer token, unlike EventSource) triggers a refresh, and a
// poll every few seconds keeps the charts moving.
"use strict";

const TOKEN_KEY = "gpuslice.token";
const POLL_MS = 3000;
const SVG = "http://www.w3.org/2000/svg";
const $ = (sel) => document.querySelector(sel);

// Set once per page load: the browser tests read it to prove that updates
// arrive without a reload.
window.gpusliceBoot = window.gpusliceBoot || Date.now();

const state = { token: "", view: "fleet", viewer: "", fleet: null, dash: null, claims: [], events: [],
  lastSeq: 0, stream: null, poll: 0, refreshTimer: 0, refreshes: 0 };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = v; else e.setAttribute(k, String(v));
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}

// ---- formatting
function mib(n) { return n >= 1024 ? (n / 1024).toFixed(n % 1024 === 0 ? 0 : 1) + " GiB" : n + " MiB"; }
function pct(x) { return Math.round(x * 100) + "%"; }
function usd(x) { return "$" + x.toFixed(x < 10 ? 2 : 0); }
function num(x) { return x >= 100 ? Math.round(x).toLocaleString("en") : x.toFixed(1); }
function hhmmss(t) { return new Date(t).toLocaleTimeString("en-GB", { hour12: false }); }

// A tenant's colour: a hue from its name, dark enough for white text and
// for contrast against the page. Other tenants (in a tenant's view) are grey.
function tenantColor(name) {
  if (!name) return "#6b6f76";
  let h = 0;
  for (const c of name) h = (h * 31 + c.codePointAt(0)) % 360;
  return `hsl(${h}, 65%, 36%)`;
}

// ---- API
async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + state.token } });
  if (r.status === 401) { signOut("Your token was refused (" + (await errorOf(r)) + "). Sign in again."); throw new Error("unauthorized"); }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " + (await errorOf(r)));
  const body = await r.json();
  // A list that goes on (X-Next-Cursor) is marked, so a view can say it
  // shows only the first page.
  if (Array.isArray(body) && r.headers.get("X-Next-Cursor")) body.more = true;
  return body;
}
async function errorOf(r) {
  try { return (await r.json()).error || r.statusText; } catch (e) { return r.statusText; }
}

// ---- sign in / out
async function signIn(token) {
  state.token = token;
  const dash = await fetch("/v1/dashboard", { headers: { Authorization: "Bearer " + token } });
  if (!dash.ok) {
    state.token = "";
    throw new Error(dash.status === 401 ? "That token is not valid." : "The server answered " + dash.status + ": " + (await errorOf(dash)));
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.dash = await dash.json();
  state.viewer = state.dash.viewer || "";
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#logout").hidden = false;
  const who = $("#who");
  who.hidden = false;
  who.textContent = state.viewer ? "Tenant " + state.viewer : "Admin";
  show(location.hash.slice(1) || "fleet", false);
  await refresh();
  startLive();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = "";
  stopLive();
  // Nothing of the last session stays: the next may be another tenant's.
  Object.assign(state, { viewer: "", fleet: null, dash: null, claims: [], events: [], lastSeq: 0 });
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  for (const id of ["#fleet", "#legend", "#events", "#pending tbody", "#running tbody", "#tenants tbody"]) $(id).replaceChildren();
  $("#nav").hidden = true;
  $("#logout").hidden = true;
  $("#who").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#status").textContent = "";
  $("#token").value = "";
  $("#token").focus();
}

function show(view, focus) {
  if (!["fleet", "claims", "tenants"].includes(view)) view = "fleet";
  state.view = view;
  for (const b of document.querySelectorAll("#nav button")) {
    if (b.dataset.view === view) b.setAttribute("aria-current", "page"); else b.removeAttribute("aria-current");
  }
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + view;
  if (location.hash !== "#" + view) history.replaceState(null, "", "#" + view);
  if (focus) $("#" + view + "-title").focus();
  render();
}

// ---- live updates
function startLive() {
  stopLive();
  state.poll = setInterval(() => refresh().catch(report), POLL_MS);
  streamEvents();
}
function stopLive() {
  clearInterval(state.poll);
  if (state.stream) state.stream.abort();
  state.stream = null;
}
function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => refresh().catch(report), 150);
}
async function streamEvents() {
  const ctrl = new AbortController();
  state.stream = ctrl;
  try {
    const r = await fetch("/v1/events?since=" + state.lastSeq, { headers: { Authorization: "Bearer " + state.token }, signal: ctrl.signal });
    if (!r.ok) throw new Error("event stream: HTTP " + r.status);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (!data) continue;
        const ev = JSON.parse(data);
        state.lastSeq = Math.max(state.lastSeq, ev.seq);
        state.events.push(ev);
        if (state.events.length > 200) state.events.shift();
        scheduleRefresh();
      }
    }
  } catch (e) {
    if (ctrl.signal.aborted) return;
  }
  if (state.stream === ctrl && state.token) setTimeout(() => { if (state.stream === ctrl) streamEvents(); }, 2000);
}

async function refresh() {
  if (!state.token) return;
  const [fleet, dash, claims] = await Promise.all([
    api("/v1/fleet"), api("/v1/dashboard"), api("/v1/claims?state=pending&state=allocated&state=running&limit=5000")]);
  state.fleet = fleet; state.dash = dash; state.claims = claims;
  state.refreshes++;
  $("#status").textContent = "Updated " + hhmmss(fleet.time) + " · live";
  render();
}
function report(e) {
  if (String(e.message) !== "unauthorized") $("#status").textContent = "Update failed: " + e.message;
}

function render() {
  if (!state.token || !state.fleet) return;
  if (state.view === "fleet") renderFleet();
  if (state.view === "claims") renderClaims();
  if (state.view === "tenants") renderTenants();
}

// ---- Fleet
function deviceLabel(d) { return d.profile ? d.profile + " @" + d.start : "whole GPU"; }
function shareWho(s) { return s.tenant ? s.tenant + " " + s.claim : "another tenant"; }

function renderFleet() {
  const tenants = new Set();
  const root = $("#fleet");
  root.replaceChildren();
  if (!state.fleet.nodes.length) root.append(el("p", { text: "No nodes have registered yet." }));
  for (const n of state.fleet.nodes) {
    const sec = el("section", { class: "node", "aria-label": "Node " + n.name });
    sec.append(el("h3", {}, "Node " + n.name + " ", el("span", { class: "state-" + n.state, text: "(" + n.state + (n.simulated ? ", simulated GPUs" : "") + ")" })));
    for (const g of n.gpus) {
      for (const d of g.devices) for (const s of d.claims || []) tenants.add(s.tenant || "");
      sec.append(renderGPU(n, g));
    }
    root.append(sec);
  }
  const legend = $("#legend");
  legend.replaceChildren();
  for (const t of [...tenants].sort()) {
    const sw = el("span", { class: "swatch", "aria-hidden": "true" });
    sw.style.background = tenantColor(t);
    legend.append(el("span", { "data-legend-tenant": t }, sw, t || "other tenants"));
  }
}

function renderGPU(n, g) {
  const slices = g.memorySlices || 1;
  const W = 720, sw = W / slices, top = 4, H = 96;
  const box = el("div", { class: "gpu", "data-gpu": g.uuid, "data-slices": slices, "data-healthy": String(g.healthy) });
  const title = el("p", { class: "gpu-title" }, `GPU ${g.index} · ${g.model} · ${mib(g.memoryMiB)}` +
    (g.memorySlices ? ` · ${g.memorySlices} memory slices` + (g.mig ? ", MIG" : ", MIG off") : ""));
  if (!g.healthy) title.append(" ", el("strong", { class: "bad", text: "UNHEALTHY" }));
  box.append(title);
  const summary = [];
  const s = svg("svg", { viewBox: `0 0 ${W + 2} ${H + 18}`, width: W + 2, height: H + 18, role: "img" });
  // the memory slices: the GPU's geometry
  for (let i = 0; i < slices; i++) {
    s.append(svg("rect", { x: 1 + i * sw, y: top, width: sw, height: H - top, fill: "#f4f5f7", stroke: "#b8bcc4", "stroke-dasharray": "3 3", class: "slot" }));
    if (g.memorySlices) s.append(svg("text", { x: 1 + i * sw + sw / 2, y: H + 14, "text-anchor": "middle", "font-size": 11, fill: "#4a4a4a", text: String(i) }));
  }
  const list = el("ul", { class: "shares" });
  for (const d of g.devices) {
    const x = 1 + d.start * sw, w = d.size * sw;
    const grp = svg("g", { class: "device", "data-device": d.id, "data-profile": d.profile || "", "data-start": d.start, "data-size": d.size,
      "data-mode": d.mode, "data-planned": d.planned ? "true" : "false" });
    grp.append(svg("rect", { x: x + 1, y: top + 1, width: w - 2, height: H - top - 2, fill: "#ffffff", stroke: g.healthy ? "#1a1a1a" : "#b3261e",
      "stroke-width": g.healthy ? 1.5 : 3, "stroke-dasharray": d.planned ? "6 3" : null }));
    grp.append(svg("text", { x: x + 6, y: top + 16, "font-size": 12, fill: "#1a1a1a", text: `${deviceLabel(d)} · ${d.mode}${d.planned ? " (planned)" : ""}` }));
    // two bars: memory and compute, each claim a share coloured by tenant
    let mx = x + 4, cx = x + 4;
    const bw = w - 8;
    grp.append(svg("text", { x: x + 6, y: top + 33, "font-size": 10, fill: "#4a4a4a", text: "memory" }));
    grp.append(svg("text", { x: x + 6, y: top + 63, "font-size": 10, fill: "#4a4a4a", text: "compute" }));
    for (const c of d.claims || []) {
      const color = tenantColor(c.tenant);
      const tip = `${shareWho(c)}: ${mib(c.memoryMiB)} (${pct(c.memoryShare)} of memory), ${pct(c.computeShare)} of compute` +
        (c.usedMiB >= 0 ? `, using ${mib(c.usedMiB)}` : "");
      const mw = Math.max(2, bw * c.memoryShare), cw = Math.max(2, bw * c.computeShare);
      grp.append(svg("rect", { x: mx, y: top + 36, width: mw, height: 14, fill: color, stroke: "#fff", class: "share share-memory",
        "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, svg("title", { text: tip })));
      grp.append(svg("rect", { x: cx, y: top + 66, width: cw, height: 14, fill: color, stroke: "#fff", class: "share share-compute",
        "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, svg("title", { text: tip })));
      mx += mw; cx += cw;
      list.append(el("li", { "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, `${deviceLabel(d)} · ${d.mode} · ${tip}`));
    }
    summary.push(`${deviceLabel(d)} ${d.mode}${d.planned ? " planned" : ""}: ` +
      ((d.claims || []).map(shareWho).join(", ") || "free"));
    s.append(grp);
  }
  s.setAttribute("aria-label", `GPU ${g.index} ${g.model}${g.healthy ? "" : " unhealthy"}: ` + summary.join("; "));
  box.append(s, list);
  return box;
}

// ---- Claims
function asks(c) {
  return (c.spec.requests || []).map((r) => {
    const parts = [];
    if ((r.count || 1) > 1) parts.push(r.count + "×");
    if (r.memoryMiB) parts.push(mib(r.memoryMiB));
    if (r.computePercent) parts.push(r.computePercent + "% compute");
    if (r.mode && r.mode !== "auto") parts.push(r.mode);
    if (r.profile) parts.push(r.profile);
    return parts.join(" ") || "a GPU";
  }).join("; ");
}

function usedByClaim() {
  const m = {};
  for (const n of state.fleet.nodes) for (const g of n.gpus) for (const d of g.devices) for (const s of d.claims || []) {
    if (s.claim && s.usedMiB >= 0) m[s.claim] = (m[s.claim] || 0) + s.usedMiB;
  }
  return m;
}

function renderClaims() {
  const pend = $("#pending tbody"), run = $("#running tbody");
  pend.replaceChildren(); run.replaceChildren();
  const used = usedByClaim();
  const pending = state.claims.filter((c) => c.state === "pending").sort((a, b) => (a.queuePosition || 0) - (b.queuePosition || 0));
  for (const c of pending) {
    pend.append(el("tr", { "data-claim": c.id },
      el("td", { class: "num", text: c.queuePosition || "" }), el("td", { text: c.id }), el("td", { text: c.tenant }),
      el("td", { text: asks(c) }), el("td", { class: "reason", text: c.reason || "not tried yet" })));
  }
  if (!pending.length) pend.append(el("tr", {}, el("td", { colspan: 5, text: "No claim is waiting." })));
  if (state.claims.more) pend.append(el("tr", {}, el("td", { colspan: 5, text: "Showing the first " + state.claims.length + " claims; gpuslice claims ls lists them all." })));
  const live = state.claims.filter((c) => c.state !== "pending");
  for (const c of live) {
    const devs = (c.allocation && c.allocation.devices) || [];
    const promised = devs.reduce((a, d) => a + d.memoryMiB, 0);
    const compute = devs.reduce((a, d) => a + (d.computePercent || 0), 0);
    const u = used[c.id];
    const memCell = el("td", {});
    if (u !== undefined) {
      memCell.append(el("meter", { min: 0, max: Math.max(promised, u, 1), value: u, low: promised, high: promised, optimum: 0,
        "aria-label": `memory used ${mib(u)} of ${mib(promised)} promised` }), " ", `${mib(u)} / ${mib(promised)}`);
    } else memCell.append(`not reported / ${mib(promised)}`);
    let comp = compute ? compute + "% promised" : "no compute promise";
    if (c.used && c.used.gpuSeconds > 0 && c.used.smSeconds > 0) comp += `, ${Math.round(100 * c.used.smSeconds / c.used.gpuSeconds)}% used on average`;
    run.append(el("tr", { "data-claim": c.id },
      el("td", { text: c.id }), el("td", { text: c.tenant }), el("td", { text: c.state }),
      el("td", { text: devs.map((d) => d.node + " " + (d.profile ? d.profile + "@" + (d.start ?? 0) : d.device)).join(", ") }),
      el("td", { text: [...new Set(devs.map((d) => d.mode === "mig" ? "exclusive (MIG)" : d.mode))].join(", ") }),
      memCell, el("td", { text: comp })));
  }
  if (!live.length) run.append(el("tr", {}, el("td", { colspan: 7, text: "No claim holds a device." })));
  const evs = $("#events");
  evs.replaceChildren();
  for (const e of state.events.slice(-100).reverse()) {
    evs.append(el("li", { "data-kind": e.kind }, `${hhmmss(e.time)} ${e.kind}` + (e.claim ? " " + e.claim : "") +
      (e.node ? " on " + e.node : "") + ": " + e.message));
  }
}

// ---- Tenants
function renderTenants() {
  const body = $("#tenants tbody");
  body.replaceChildren();
  for (const t of state.dash.tenants) {
    const u = t.usage;
    const quota = t.memoryQuotaMiB ? mib(t.memoryQuotaMiB) : "no limit";
    const cost = t.cost;
    const note = cost.unpriced && cost.unpriced.length ? " (no price for " + cost.unpriced.join(", ") + ")" : "";
    body.append(el("tr", { "data-tenant": t.name },
      el("th", { scope: "row" }, el("span", { class: "swatch", "aria-hidden": "true", style: null }), " " + t.name),
      el("td", { class: "num", text: u.claims }), el("td", { class: "num", text: t.pending }),
      el("td", { text: mib(u.memoryMiB) + " / " + quota + (t.computeQuotaPercent ? `, compute ${u.computePercent}% / ${t.computeQuotaPercent}%` : "") }),
      el("td", { class: "num", text: num(u.gpuSeconds) }), el("td", { class: "num", text: num(u.memoryMiBSeconds / 1024) }),
      el("td", { class: "num", text: usd(cost.perHour) + note }), el("td", { class: "num", text: usd(cost.perMonth) }),
      el("td", { class: "num", text: usd(cost.dedicatedPerHour) }), el("td", { class: "num", text: usd(cost.dedicatedPerMonth) })));
    body.lastChild.querySelector(".swatch").style.background = tenantColor(t.name);
  }
  const ser = state.dash.series || [];
  const pts = (f) => ser.map((x) => [Date.parse(x.time), f(x)]);
  const ratio = (a, b) => (b > 0 ? (100 * a) / b : 0);
  lineChart($("#chart-util"), [
    { name: "memory promised", color: "#0b57d0", points: pts((x) => ratio(x.memoryPromisedMiB, x.memoryMiB)) },
    { name: "compute promised", color: "#b3261e", points: pts((x) => ratio(x.computePromised, x.gpus)) },
    { name: "memory used", color: "#146c2e", points: pts((x) => ratio(x.memoryUsedMiB, x.memoryMiB)) },
    { name: "GPUs in use", color: "#7d5260", points: pts((x) => ratio(x.gpusInUse, x.gpus)) }], "%", 100);
  lineChart($("#chart-pending"), [{ name: "pending", color: "#b3261e", points: pts((x) => x.pending) }], "claims");
  const names = state.dash.tenants.map((t) => t.name);
  lineChart($("#chart-gpusec"), names.map((n) => ({ name: n, color: tenantColor(n), points: pts((x) => (x.tenants[n] || {}).gpuSeconds || 0) })), "GPU-s");
  lineChart($("#chart-memsec"), names.map((n) => ({ name: n, color: tenantColor(n), points: pts((x) => ((x.tenants[n] || {}).memoryMiBSeconds || 0) / 1024) })), "GiB-s");
}

// lineChart draws series of [time ms, value] points as an SVG line chart
// with its own axes; fixedMax pins the y axis (e.g. 100 for percents).
function lineChart(root, series, unit, fixedMax) {
  const W = 520, H = 200, L = 48, R = 10, T = 10, B = 40;
  let t0 = Infinity, t1 = -Infinity, vmax = 0;
  for (const s of series) for (const [t, v] of s.points) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); vmax = Math.max(vmax, v); }
  const ymax = fixedMax || (vmax > 0 ? niceCeil(vmax) : 1);
  if (!(t1 > t0)) { t0 = (isFinite(t0) ? t0 : Date.now()) - 1000; t1 = t0 + 1000; }
  const X = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R), Y = (v) => T + (1 - Math.min(v, ymax) / ymax) * (H - T - B);
  const desc = series.map((s) => `${s.name} ${s.points.length ? num(s.points[s.points.length - 1][1]) : "no data"} ${unit}`).join(", ");
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "latest: " + desc });
  for (const f of [0, 0.5, 1]) {
    const y = Y(ymax * f);
    s.append(svg("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#d0d3d9" }));
    s.append(svg("text", { x: L - 4, y: y + 4, "text-anchor": "end", "font-size": 10, fill: "#4a4a4a", text: num(ymax * f) }));
  }
  s.append(svg("text", { x: L, y: H - B + 14, "font-size": 10, fill: "#4a4a4a", text: hhmmss(t0) }));
  s.append(svg("text", { x: W - R, y: H - B + 14, "text-anchor": "end", "font-size": 10, fill: "#4a4a4a", text: hhmmss(t1) }));
  s.append(svg("text", { x: 4, y: H - B + 14, "font-size": 10, fill: "#4a4a4a", text: unit }));
  let lx = L;
  for (const ser of series) {
    if (ser.points.length) {
      s.append(svg("polyline", { points: ser.points.map(([t, v]) => X(t).toFixed(1) + "," + Y(v).toFixed(1)).join(" "),
        fill: "none", stroke: ser.color, "stroke-width": 2, "data-series": ser.name }));
    }
    s.append(svg("rect", { x: lx, y: H - 16, width: 10, height: 10, fill: ser.color }));
    s.append(svg("text", { x: lx + 14, y: H - 7, "font-size": 11, fill: "#1a1a1a", text: ser.name }));
    lx += 24 + 7 * ser.name.length;
  }
  root.replaceChildren(s);
}
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// ---- wiring
document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    $("#login-error").textContent = "";
    signIn($("#token").value.trim()).catch((e) => { $("#login-error").textContent = e.message; $("#token").focus(); });
  });
  $("#logout").addEventListener("click", () => signOut("Signed out."));
  for (const b of document.querySelectorAll("#nav button")) b.addEventListener("click", () => show(b.dataset.view, true));
  for (const h of document.querySelectorAll(".view h2")) h.setAttribute("tabindex", "-1");
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved).catch(() => signOut("Your saved token was refused; sign in again."));
  else $("#token").focus();
});
