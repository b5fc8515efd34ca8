// gpuslice dashboard: plain JavaScript, no dependencies, no build step.
// Everything shown comes from the API with the token kept in session
// storage; the page itself holds no data. The fleet comes as one compact
// grid over an event stream (GET /v1/dashboard/stream, read with fetch,
// which can send the bearer token, unlike EventSource), then as the cells
// that changed; it is drawn on a canvas that paints only what is on
// screen. Views are addressed by the URL's hash, filters included, so a
// view can be shared.
"use strict";

const TOKEN_KEY = "gpuslice.token";
const THEME_KEY = "gpuslice.theme";
const SVG = "http://www.w3.org/2000/svg";
const $ = (sel) => document.querySelector(sel);

// Twelve tenant colours, told apart under protanopia, deuteranopia and
// tritanopia as well as normal vision (internal/web's palette test checks
// the distances); never the only cue: every cell and line is named on
// hover, lines also differ by dash, the legend names each colour.
const PALETTE = ["#117733", "#D55E00", "#6699CC", "#332288", "#882255", "#E69F00",
  "#CC6677", "#AA4499", "#88CCEE", "#F0E442", "#999933", "#CC79A7"];
const DASHES = ["", "6 3", "2 3", "8 3 2 3", "12 4", "1 2"];
// A sequential scale (viridis), light to dark, for promised and used.
const SCALE = ["#fde725", "#5ec962", "#21918c", "#3b528b", "#440154"];
const MODE_COLORS = { mig: "#332288", exclusive: "#117733", timeslice: "#E69F00", mps: "#88CCEE", idle: null };
const MODE_NAMES = { mig: "MIG", exclusive: "exclusive", timeslice: "time-sliced", mps: "MPS", idle: "idle" };
const HEALTHY = "#6699CC", UNHEALTHY = "#D55E00";

// Set once per page load: the browser tests read it to prove that updates
// arrive without a reload. gpusliceStats holds the timings the benchmark
// reads (also as performance marks and measures).
window.gpusliceBoot = window.gpusliceBoot || Date.now();
window.gpusliceStats = { firstPaint: 0, updates: [], gridBytes: 0 };

const state = {
  token: "", viewer: "", route: { view: "fleet", arg: [] }, fleetHash: "#fleet",
  grid: null, gpus: [], summary: null, dash: null, claims: [], liveCursor: "", events: [], lastSeq: 0,
  stream: null, events$: null, refreshTimer: 0, tenantsTimer: 0, painted: false,
  filter: {}, view: null, colors: new Map(), focus: -1, tenantsAfter: "", tenantsPages: [],
};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids) if (k !== null && k !== undefined && k !== false) e.append(k);
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
function link(href, text, attrs) { return el("a", Object.assign({ href }, attrs || {}), text); }
function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

// ---- formatting
function mib(n) {
  if (n >= 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " TiB";
  return n >= 1024 ? (n / 1024).toFixed(n % 1024 === 0 ? 0 : 1) + " GiB" : Math.round(n) + " MiB";
}
function pct(x) { return Math.round(x * 100) + "%"; }
function usd(x) { return "$" + (x < 10 ? x.toFixed(2) : Math.round(x).toLocaleString("en")); }
function num(x) { return Math.abs(x) >= 100 ? Math.round(x).toLocaleString("en") : (Math.round(x * 10) / 10).toString(); }
function count(n) { return n.toLocaleString("en"); }
function hhmmss(t) { return new Date(t).toLocaleTimeString("en-GB", { hour12: false }); }
function modeName(m) { return MODE_NAMES[m] || m; }

// ---- API
async function api(path) {
  // A timer or a late answer of a session already signed out asks nothing
  // and signs nothing out: the login form may hold the next token, half typed.
  const token = state.token;
  if (!token) throw new Error("signed out");
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (token !== state.token) throw new Error("signed out");
  if (r.status === 401) { signOut("Your token was refused (" + (await errorOf(r)) + "). Sign in again."); throw new Error("unauthorized"); }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " + (await errorOf(r)));
  const body = await r.json();
  const next = r.headers.get("X-Next-Cursor");
  if (Array.isArray(body) && next) body.next = next;
  return body;
}
async function errorOf(r) {
  try { return (await r.json()).error || r.statusText; } catch (e) { return r.statusText; }
}

// ---- theme
function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  const b = $("#theme");
  b.setAttribute("aria-pressed", String(theme === "dark"));
  b.textContent = theme === "dark" ? "Light theme" : "Dark theme";
  drawGrid();
  rerenderCharts();
}
function initialTheme() {
  const saved = localStorage.getItem(THEME_KEY);
  if (saved === "dark" || saved === "light") return saved;
  return matchMedia && matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

// ---- sign in / out
async function signIn(token) {
  state.token = token;
  const r = await fetch("/v1/fleet/summary", { headers: { Authorization: "Bearer " + token } });
  if (!r.ok) {
    state.token = "";
    throw new Error(r.status === 401 ? "That token is not valid." : "The server answered " + r.status + ": " + (await errorOf(r)));
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.summary = await r.json();
  state.viewer = state.summary.viewer || "";
  $("#login").hidden = true;
  $("#nav").hidden = false;
  $("#logout").hidden = false;
  const who = $("#who");
  who.hidden = false;
  who.textContent = state.viewer ? "Tenant " + state.viewer : "Admin";
  renderSummary();
  startStream();
  route(false);
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = "";
  stopStream();
  stopEvents();
  // Nothing of the last session stays: the next may be another tenant's.
  Object.assign(state, { viewer: "", grid: null, gpus: [], summary: null, dash: null, claims: [], events: [], lastSeq: 0, view: null, focus: -1 });
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  for (const id of ["#summary", "#grid-legend", "#gpu-list", "#gpu-body", "#tenant-body", "#claim-body", "#events", "#pending tbody",
    "#running tbody", "#tenants tbody", "#match", "#tenant-names"]) $(id).replaceChildren();
  for (const id of ["#chart-util", "#chart-pending", "#chart-gpusec", "#chart-mem"]) $(id).replaceChildren();
  const c = $("#grid");
  c.getContext("2d").clearRect(0, 0, c.width, c.height);
  $("#grid-wrap").style.height = "0px";
  $("#nav").hidden = true;
  $("#logout").hidden = true;
  $("#who").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
  $("#status").textContent = "";
  $("#token").value = "";
  $("#token").focus();
}

// ---- routing: #fleet?filters, #gpu/NODE/INDEX, #tenant/NAME, #claim/ID, #claims, #tenants
function parseHash() {
  const h = decodeURIComponent(location.hash.slice(1) || "fleet");
  const [path, query] = h.split("?");
  const parts = path.split("/");
  return { view: parts[0], arg: parts.slice(1), query: new URLSearchParams(query || "") };
}
function go(hash) { if (location.hash !== hash) location.hash = hash; else route(true); }

function route(focus) {
  if (!state.token) return;
  const r = parseHash();
  const views = ["fleet", "gpu", "tenant", "claim", "claims", "tenants"];
  if (!views.includes(r.view)) r.view = "fleet";
  state.route = r;
  const nav = { gpu: "fleet", tenant: "tenants", claim: "claims" }[r.view] || r.view;
  for (const b of document.querySelectorAll("#nav button")) {
    if (b.dataset.view === nav) b.setAttribute("aria-current", "page"); else b.removeAttribute("aria-current");
  }
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + r.view;
  if (r.view !== "claims") stopEvents();
  if (r.view === "fleet") {
    state.fleetHash = location.hash || "#fleet";
    for (const a of document.querySelectorAll(".back-fleet")) a.setAttribute("href", state.fleetHash);
    readFilters(r.query);
    applyFilters();
  }
  const loaders = { gpu: showGPU, tenant: showTenant, claim: showClaim, claims: showClaims, tenants: showTenants };
  if (loaders[r.view]) loaders[r.view](r).catch(report);
  if (focus) {
    const h = $("#" + r.view + "-title");
    if (h) h.focus();
  }
}

// ---- the dashboard stream
function startStream() {
  stopStream();
  readStream();
}
function stopStream() {
  if (state.stream) state.stream.abort();
  state.stream = null;
}
// sse reads Server-Sent Events from a fetch response, calling on(event, data).
async function sse(r, on) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) on(event, data.join("\n"));
    }
  }
}
async function readStream() {
  const ctrl = new AbortController();
  state.stream = ctrl;
  const token = state.token;
  try {
    const r = await fetch("/v1/dashboard/stream", { headers: { Authorization: "Bearer " + token }, signal: ctrl.signal });
    if (token !== state.token) return; // signed out meanwhile
    if (r.status === 401) { signOut("Your token was refused. Sign in again."); return; }
    if (!r.ok) throw new Error("dashboard stream: HTTP " + r.status + " " + (await errorOf(r)));
    await sse(r, (event, data) => {
      if (event === "grid") {
        performance.mark("gpuslice:grid-received");
        window.gpusliceStats.gridBytes = data.length;
        const t0 = performance.now();
        const grid = JSON.parse(data);
        window.gpusliceStats.parseMs = performance.now() - t0;
        setGrid(grid);
        window.gpusliceStats.gridMs = performance.now() - t0;
      } else if (event === "cells") {
        const t0 = performance.now();
        applyDelta(JSON.parse(data));
        const t1 = performance.now();
        performance.measure("gpuslice:update", { start: t0, end: t1 });
        window.gpusliceStats.updates.push(t1 - t0);
      } else if (event === "summary") {
        state.summary = JSON.parse(data);
        renderSummary();
        changed();
      } else if (event === "sample") {
        // A new sample: the open tenants view reads its page again (the
        // stream's samples carry fleet totals only).
        if (state.route.view === "tenants") {
          clearTimeout(state.tenantsTimer);
          state.tenantsTimer = setTimeout(() => showTenants().catch(report), 1000);
        }
      }
      $("#status").textContent = "Updated " + hhmmss(Date.now()) + " · live";
    });
  } catch (e) {
    if (ctrl.signal.aborted) return;
    report(e);
  }
  if (state.stream === ctrl && state.token) setTimeout(() => { if (state.stream === ctrl) readStream(); }, 2000);
}
// changed refreshes the open list views a moment after the fleet changed.
function changed() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => {
    if (state.route.view === "claims") loadClaims().catch(report);
  }, 300);
}
function report(e) {
  if (String(e && e.message) !== "unauthorized") $("#status").textContent = "Update failed: " + (e && e.message);
}

// ---- the grid's data
// decodeCell reads one cell of web.Grid (see grid.go for the layout).
function decodeCell(c) {
  const g = { node: c[0], index: c[1], model: c[2], healthy: (c[3] & 1) === 1, mig: (c[3] & 2) === 2,
    mem: c[4], used: c[5], comp: c[6], devs: [], tenants: [] };
  let k = 8;
  for (let d = 0; d < c[7]; d++) {
    const dev = { start: c[k], size: c[k + 1], mode: state.grid.modes[c[k + 2]], planned: c[k + 3] === 1, shares: [] };
    const n = c[k + 4];
    k += 5;
    for (let s = 0; s < n; s++, k += 3) {
      dev.shares.push({ t: c[k], m: c[k + 1] / 1000, c: c[k + 2] / 1000 });
      if (!g.tenants.includes(c[k])) g.tenants.push(c[k]);
    }
    g.devs.push(dev);
  }
  g.mode = g.mig ? "mig" : (g.devs[0] ? g.devs[0].mode : "idle");
  const model = state.grid.models[g.model];
  const slices = model.slices || 1;
  let held = 0, shares = 0;
  for (const d of g.devs) { if (d.shares.length) held += d.size; shares += d.shares.length; }
  g.state = !shares ? "free" : (g.mig ? held >= slices : (g.mode === "exclusive" || g.mem >= 990 || g.comp >= 990)) ? "full" : "partial";
  g.lost = state.grid.nodes[g.node].state !== "ready";
  return g;
}
function setGrid(grid) {
  state.grid = grid;
  state.gpus = grid.gpus.map((c, i) => Object.assign(decodeCell(c), { i }));
  fillChoices();
  applyFilters(true); // paints now, not at the next frame
}
function applyDelta(d) {
  if (!state.grid) return;
  state.grid.models.push(...(d.models || []));
  state.grid.tenants.push(...(d.tenants || []));
  for (const c of d.cells) {
    const i = c[0];
    state.grid.gpus[i] = c.slice(1);
    state.gpus[i] = Object.assign(decodeCell(state.grid.gpus[i]), { i });
  }
  if (d.tenants && d.tenants.length) fillChoices();
  applyFilters(true);
}
function tenantName(t) { return t < 0 ? "another tenant" : state.grid.tenants[t]; }

function fillChoices() {
  const fill = (sel, names) => {
    const s = $(sel), keep = s.value;
    s.replaceChildren(el("option", { value: "", text: "any" }), ...names.map((n) => el("option", { value: n, text: n })));
    s.value = names.includes(keep) ? keep : "";
  };
  fill("#f-model", state.grid.models.map((m) => m.name));
  fill("#f-pool", [...new Set(state.grid.nodes.map((n) => n.pool).filter(Boolean))].sort());
  // The tenant list offers at most 500 names (after the first paint);
  // typing matches any.
  setTimeout(() => {
    if (state.grid) $("#tenant-names").replaceChildren(...state.grid.tenants.slice(0, 500).map((t) => el("option", { value: t })));
  }, 500);
  readFilters(parseHash().query);
}

// ---- filters (kept in the URL)
const FILTERS = ["q", "tenant", "node", "model", "pool", "mode", "state", "unhealthy", "group", "color"];
function readFilters(q) {
  const f = {};
  for (const k of FILTERS) f[k] = q.get(k) || "";
  f.group = ["node", "pool", "model"].includes(f.group) ? f.group : "node";
  f.color = ["tenant", "alloc", "used", "health", "mode"].includes(f.color) ? f.color : "tenant";
  state.filter = f;
  for (const k of FILTERS) {
    const input = $("#f-" + k);
    if (!input) continue;
    if (input.type === "checkbox") input.checked = f[k] === "1";
    else if (document.activeElement !== input) input.value = f[k];
  }
}
function writeFilters() {
  const q = new URLSearchParams();
  for (const k of FILTERS) {
    const input = $("#f-" + k);
    const v = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
    if (v && !(k === "group" && v === "node") && !(k === "color" && v === "tenant")) q.set(k, v);
  }
  const hash = "#fleet" + (q.toString() ? "?" + q.toString() : "");
  history.replaceState(null, "", hash);
  state.fleetHash = hash;
  for (const a of document.querySelectorAll(".back-fleet")) a.setAttribute("href", hash);
  readFilters(q);
  applyFilters();
}
function matches(g, f, tenantSet) {
  const node = state.grid.nodes[g.node];
  const model = state.grid.models[g.model].name;
  if (f.unhealthy === "1" && g.healthy) return false;
  if (f.model && model !== f.model) return false;
  if (f.pool && node.pool !== f.pool) return false;
  if (f.mode && g.mode !== f.mode) return false;
  if (f.state === "lost" ? !g.lost : f.state && g.state !== f.state) return false;
  if (f.node && !node.name.toLowerCase().includes(f.node.toLowerCase())) return false;
  if (tenantSet && !g.tenants.some((t) => tenantSet.has(t))) return false;
  if (f.q) {
    const q = f.q.toLowerCase();
    if (!node.name.toLowerCase().includes(q) && !model.toLowerCase().includes(q) && !(node.pool || "").toLowerCase().includes(q) &&
      !g.tenants.some((t) => t >= 0 && state.grid.tenants[t].toLowerCase().includes(q))) return false;
  }
  return true;
}
function tenantsMatching(text) {
  if (!text) return null;
  const s = new Set(), q = text.toLowerCase();
  state.grid.tenants.forEach((t, i) => { if (t.toLowerCase() === q || t.toLowerCase().includes(q)) s.add(i); });
  return s;
}

// applyFilters picks the GPUs to show, their colours and layout, and draws.
function applyFilters(update) {
  if (!state.grid) return;
  const f = state.filter;
  const tset = tenantsMatching(f.tenant);
  const shown = state.gpus.filter((g) => matches(g, f, tset));
  // The twelve tenants with the most GPUs in view get the palette's
  // colours; the rest share the "other tenants" stripes.
  const byTenant = new Map();
  for (const g of shown) for (const t of g.tenants) if (t >= 0) byTenant.set(t, (byTenant.get(t) || 0) + 1);
  const names = state.grid.tenants;
  const top = [...byTenant.entries()].sort((a, b) => b[1] - a[1] || (names[a[0]] < names[b[0]] ? -1 : 1)).slice(0, PALETTE.length);
  state.colors = new Map(top.map(([t], i) => [t, PALETTE[i]]));
  state.top = top;
  state.others = byTenant.size - top.length;
  const nodes = new Set(shown.map((g) => g.node));
  $("#match").textContent = `Showing ${count(shown.length)} of ${count(state.gpus.length)} GPUs on ${count(nodes.size)} of ${count(state.grid.nodes.length)} nodes`;
  state.view = layout(shown);
  if (state.focus >= state.view.cells.length) state.focus = state.view.cells.length - 1;
  $("#grid").setAttribute("aria-label", `Map of ${count(shown.length)} GPUs, grouped by ${f.group}, coloured by ${$("#f-color").selectedOptions[0].textContent}`);
  renderLegend();
  if (update) paint(); else drawGrid();
  if (!update || shown.length <= 200) renderList(shown);
}

// ---- layout and drawing (a canvas as tall as the content, painted only where visible)
const CELL = 18, GAP = 3, PAD = 6, LABEL = 14;
function layout(shown) {
  const wrap = $("#grid-wrap");
  const W = Math.max(240, wrap.clientWidth - 2);
  const cells = [], labels = [];
  let y = PAD;
  const f = state.filter;
  if (f.group === "node") {
    const byNode = new Map();
    for (const g of shown) { if (!byNode.has(g.node)) byNode.set(g.node, []); byNode.get(g.node).push(g); }
    const perNode = Math.max(8, ...[...byNode.values()].map((l) => l.length).slice(0, 50));
    const bw = perNode * (CELL + GAP) - GAP + 2 * PAD;
    const cols = Math.max(1, Math.floor((W - PAD) / (bw + PAD)));
    let col = 0;
    for (const [n, list] of byNode) {
      const x = PAD + col * (bw + PAD);
      const node = state.grid.nodes[n];
      labels.push({ text: node.name + (node.state !== "ready" ? " (" + node.state + ")" : ""), x: x + PAD, y: y + 11, bad: node.state !== "ready" });
      list.forEach((g, k) => cells.push({ g, x: x + PAD + k * (CELL + GAP), y: y + LABEL + 2 }));
      if (++col === cols) { col = 0; y += LABEL + CELL + 10; }
    }
    if (col) y += LABEL + CELL + 10;
  } else {
    const key = (g) => (f.group === "pool" ? state.grid.nodes[g.node].pool || "(no pool)" : state.grid.models[g.model].name);
    const groups = new Map();
    for (const g of shown) { const k = key(g); if (!groups.has(k)) groups.set(k, []); groups.get(k).push(g); }
    const cols = Math.max(1, Math.floor((W - 2 * PAD + GAP) / (CELL + GAP)));
    for (const k of [...groups.keys()].sort()) {
      const list = groups.get(k);
      labels.push({ text: `${k} · ${count(list.length)} GPUs`, x: PAD, y: y + 12, head: true });
      y += 20;
      list.forEach((g, i) => cells.push({ g, x: PAD + (i % cols) * (CELL + GAP), y: y + Math.floor(i / cols) * (CELL + GAP) }));
      y += Math.ceil(list.length / cols) * (CELL + GAP) + 10;
    }
  }
  return { W, H: Math.max(y + PAD, 60), cells, labels };
}

let drawQueued = false;
function drawGrid() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => { drawQueued = false; paint(); });
}
// paint draws now (also called directly when a measurement needs it).
function paint() {
  const v = state.view, canvas = $("#grid"), wrap = $("#grid-wrap");
  if (!v || $("#view-fleet").hidden) return;
  wrap.style.height = v.H + 2 + "px";
  const dpr = window.devicePixelRatio || 1;
  const h = Math.min(v.H, window.innerHeight);
  const top = Math.max(0, Math.min(v.H - h, -wrap.getBoundingClientRect().top));
  if (canvas.width !== Math.round(v.W * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(v.W * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.height = h + "px";
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, -top * dpr);
  ctx.fillStyle = css("--grid-bg");
  ctx.fillRect(0, top, v.W, h);
  const colors = { empty: css("--cell-empty"), line: css("--cell-line"), fg: css("--fg"), muted: css("--muted"), bad: css("--bad"),
    other: css("--other"), focus: css("--focus") };
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "alphabetic";
  for (const l of v.labels) {
    if (l.y < top - 20 || l.y > top + h + 20) continue;
    ctx.fillStyle = l.bad ? colors.bad : l.head ? colors.fg : colors.muted;
    ctx.font = l.head ? "600 12px system-ui, sans-serif" : "11px system-ui, sans-serif";
    ctx.fillText(l.text, l.x, l.y);
  }
  for (let i = 0; i < v.cells.length; i++) {
    const c = v.cells[i];
    if (c.y + CELL < top || c.y > top + h) continue;
    drawCell(ctx, c.g, c.x, c.y, colors);
    if (i === state.focus) {
      ctx.strokeStyle = colors.focus; ctx.lineWidth = 3;
      ctx.strokeRect(c.x - 2.5, c.y - 2.5, CELL + 5, CELL + 5);
    }
  }
  if (!state.painted && v.cells.length) {
    state.painted = true;
    performance.mark("gpuslice:first-paint");
    window.gpusliceStats.firstPaint = performance.now();
  }
}
function scaleColor(x) {
  const i = Math.min(SCALE.length - 1, Math.max(0, Math.floor(x * SCALE.length)));
  return SCALE[i];
}
function hatch(ctx, x, y, w, h, color) {
  ctx.save();
  ctx.beginPath(); ctx.rect(x, y, w, h); ctx.clip();
  ctx.strokeStyle = color; ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let k = -h; k < w; k += 5) { ctx.moveTo(x + k, y + h); ctx.lineTo(x + k + h, y); }
  ctx.stroke();
  ctx.restore();
}
function tenantFill(ctx, t, x, y, w, h, colors) {
  const col = t >= 0 ? state.colors.get(t) : undefined;
  if (col) { ctx.fillStyle = col; ctx.fillRect(x, y, w, h); return; }
  ctx.fillStyle = colors.empty; ctx.fillRect(x, y, w, h);
  hatch(ctx, x, y, w, h, colors.other); // another tenant, or one beyond the twelve
}
function drawCell(ctx, g, x, y, colors) {
  const mode = state.filter.color;
  ctx.fillStyle = colors.empty;
  ctx.fillRect(x, y, CELL, CELL);
  if (mode === "tenant") {
    const slices = state.grid.models[g.model].slices || 1;
    if (g.mig) {
      const sw = CELL / slices;
      for (const d of g.devs) {
        if (d.shares.length) tenantFill(ctx, d.shares[0].t, x + d.start * sw, y, d.size * sw, CELL, colors);
        ctx.fillStyle = colors.line;
        ctx.fillRect(x + (d.start + d.size) * sw - 0.5, y, 1, CELL);
      }
    } else {
      let yy = y + CELL;
      const d = g.devs[0];
      for (const s of (d ? d.shares : [])) {
        const hh = d.mode === "exclusive" ? CELL : Math.max(2, Math.round(CELL * s.m));
        yy -= hh;
        tenantFill(ctx, s.t, x, Math.max(y, yy), CELL, Math.min(hh, yy + hh - y), colors);
        ctx.fillStyle = colors.line;
        ctx.fillRect(x, Math.max(y, yy), CELL, 1);
      }
    }
  } else if (mode === "alloc") {
    const v = Math.max(g.mem, g.comp) / 1000;
    if (v > 0) { ctx.fillStyle = scaleColor(v); ctx.fillRect(x, y, CELL, CELL); }
  } else if (mode === "used") {
    if (g.used >= 0) { ctx.fillStyle = scaleColor(g.used / 1000); ctx.fillRect(x, y, CELL, CELL); }
    else if (g.devs.some((d) => d.shares.length)) hatch(ctx, x, y, CELL, CELL, colors.other);
  } else if (mode === "health") {
    ctx.fillStyle = g.healthy ? HEALTHY : UNHEALTHY; ctx.fillRect(x, y, CELL, CELL);
  } else if (mode === "mode") {
    const col = MODE_COLORS[g.mode];
    if (col) { ctx.fillStyle = col; ctx.fillRect(x, y, CELL, CELL); }
  }
  if (g.lost) hatch(ctx, x, y, CELL, CELL, colors.fg);
  if (!g.healthy) {
    ctx.strokeStyle = colors.bad; ctx.lineWidth = 2.5;
    ctx.strokeRect(x + 1, y + 1, CELL - 2, CELL - 2);
    ctx.beginPath(); ctx.moveTo(x + 3, y + 3); ctx.lineTo(x + CELL - 3, y + CELL - 3);
    ctx.moveTo(x + CELL - 3, y + 3); ctx.lineTo(x + 3, y + CELL - 3); ctx.stroke();
  }
}

function renderLegend() {
  const root = $("#grid-legend");
  const items = [];
  const sw = (color, cls) => { const s = el("span", { class: "swatch" + (cls ? " " + cls : ""), "aria-hidden": "true" }); if (color) s.style.background = color; return s; };
  const mode = state.filter.color;
  if (mode === "tenant") {
    for (const [t, n] of state.top) items.push(el("span", { "data-legend-tenant": state.grid.tenants[t] }, sw(state.colors.get(t)), `${state.grid.tenants[t]} (${count(n)})`));
    const other = state.others > 0 || state.viewer;
    if (other) items.push(el("span", { "data-legend-tenant": "" }, sw(null, "striped"), state.viewer ? "other tenants" : `${count(state.others)} more tenants`));
  } else if (mode === "alloc" || mode === "used") {
    SCALE.forEach((c, i) => items.push(el("span", {}, sw(c), `${i * 20}–${(i + 1) * 20}%`)));
    if (mode === "used") items.push(el("span", {}, sw(null, "striped"), "not reported"));
  } else if (mode === "health") {
    items.push(el("span", {}, sw(HEALTHY), "healthy"), el("span", {}, sw(UNHEALTHY), "unhealthy (also crossed out)"));
  } else if (mode === "mode") {
    for (const m of ["mig", "exclusive", "timeslice", "mps"]) items.push(el("span", {}, sw(MODE_COLORS[m]), MODE_NAMES[m]));
    items.push(el("span", {}, sw(null), "idle"));
  }
  items.push(el("span", {}, el("span", { class: "swatch cross", "aria-hidden": "true" }), "unhealthy GPU"));
  root.replaceChildren(...items);
  for (const s of root.querySelectorAll(".striped")) s.style.background = `repeating-linear-gradient(135deg, ${css("--other")} 0 2px, ${css("--cell-empty")} 2px 5px)`;
  for (const s of root.querySelectorAll(".cross")) { s.style.borderColor = css("--bad"); s.style.borderWidth = "3px"; }
}

// describe is a GPU cell in words: the tooltip, the list and the screen reader.
function describe(g) {
  const node = state.grid.nodes[g.node], model = state.grid.models[g.model];
  const head = `${node.name} · GPU ${g.index} · ${model.name} · ${modeName(g.mode)}` + (g.healthy ? "" : " · UNHEALTHY") + (g.lost ? " · node " + node.state : "");
  const use = `memory promised ${pct(g.mem / 1000)}` + (g.used >= 0 ? `, used ${pct(g.used / 1000)}` : "") + `; compute promised ${pct(g.comp / 1000)}`;
  const devs = [];
  for (const d of g.devs) {
    const where = g.mig ? `slices ${d.start}–${d.start + d.size - 1}` : "whole GPU";
    const who = d.shares.map((s) => `${tenantName(s.t)}` + (d.mode === "exclusive" ? "" : ` ${pct(s.m)} memory, ${pct(s.c)} compute`)).join("; ") || "free";
    devs.push(`${where} (${modeName(d.mode)}${d.planned ? ", planned" : ""}): ${who}`);
  }
  if (!devs.length) devs.push(g.mig ? "no MIG instances" : "free");
  return { head, use, devs };
}

function cellAt(px, py) {
  const v = state.view;
  if (!v) return -1;
  for (let i = 0; i < v.cells.length; i++) {
    const c = v.cells[i];
    if (px >= c.x && px < c.x + CELL && py >= c.y && py < c.y + CELL) return i;
  }
  return -1;
}
function canvasPoint(ev) {
  const r = $("#grid-wrap").getBoundingClientRect();
  return [ev.clientX - r.left, ev.clientY - r.top];
}
function showTip(i, ev) {
  const tip = $("#tip");
  if (i < 0) { tip.hidden = true; return; }
  const d = describe(state.view.cells[i].g);
  tip.replaceChildren(el("p", {}, el("strong", { text: d.head })), el("p", { text: d.use }), ...d.devs.map((t) => el("p", { text: t })));
  tip.hidden = false;
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  const y = ev.clientY + 14 + tip.offsetHeight > window.innerHeight ? ev.clientY - tip.offsetHeight - 10 : ev.clientY + 14;
  tip.style.left = x + "px";
  tip.style.top = y + "px";
}
function openCell(i) {
  const g = state.view.cells[i].g;
  go(`#gpu/${encodeURIComponent(state.grid.nodes[g.node].name)}/${g.index}`);
}
function moveFocus(i) {
  const v = state.view;
  if (!v || !v.cells.length) return;
  state.focus = Math.max(0, Math.min(v.cells.length - 1, i));
  const c = v.cells[state.focus];
  const wrap = $("#grid-wrap");
  const top = wrap.getBoundingClientRect().top + window.scrollY;
  const y = top + c.y;
  if (y < window.scrollY + 40 || y + CELL > window.scrollY + window.innerHeight - 40) window.scrollTo(0, y - window.innerHeight / 2);
  const d = describe(c.g);
  $("#grid-focus").textContent = `${d.head}. ${d.use}. ${d.devs.join(". ")}. Press Enter to open.`;
  drawGrid();
}
function rowStep() {
  const v = state.view, i = Math.max(0, state.focus), c = v.cells[i];
  // the cell below: the nearest with the same x in the next row
  let best = -1;
  for (let k = i + 1; k < v.cells.length; k++) if (v.cells[k].y > c.y) { if (best < 0 || Math.abs(v.cells[k].x - c.x) < Math.abs(v.cells[best].x - c.x)) best = k; if (v.cells[k].y > v.cells[best].y) break; }
  return best < 0 ? 0 : best - i;
}

function renderList(shown) {
  const root = $("#gpu-list");
  if (shown.length > 200) {
    root.replaceChildren(el("p", { class: "help", text: `${count(shown.length)} GPUs match: narrow the filters (or search) to list them here, or pick one on the map.` }));
    return;
  }
  if (!shown.length) { root.replaceChildren(el("p", { text: "No GPU matches these filters." })); return; }
  const body = el("tbody");
  for (const g of shown) {
    const node = state.grid.nodes[g.node], d = describe(g);
    const tenants = [...new Set(g.tenants)].map(tenantName);
    const who = el("td");
    tenants.slice(0, 6).forEach((t, k) => {
      if (k) who.append(", ");
      who.append(t === "another tenant" ? t : link("#tenant/" + encodeURIComponent(t), t));
    });
    if (tenants.length > 6) who.append(` and ${tenants.length - 6} more`);
    body.append(el("tr", { "data-gpu": node.name + "/" + g.index },
      el("td", {}, link(`#gpu/${encodeURIComponent(node.name)}/${g.index}`, `${node.name} GPU ${g.index}`)),
      el("td", { text: state.grid.models[g.model].name }), el("td", { text: modeName(g.mode) }),
      el("td", { class: g.healthy ? "" : "bad", text: (g.healthy ? "healthy" : "UNHEALTHY") + (g.lost ? ", node " + node.state : "") }),
      el("td", { text: g.state === "partial" ? "partly used" : g.state }), who, el("td", { text: d.use }), el("td", { class: "devs", text: d.devs.join("; ") })));
  }
  const table = el("table", { id: "gpu-table" }, el("caption", { text: "GPUs that match the filters" }),
    el("thead", {}, el("tr", {}, ...["GPU", "Model", "Mode", "Health", "State", "Tenants", "Memory and compute", "Devices"].map((h) => el("th", { scope: "col", text: h })))), body);
  root.replaceChildren(el("div", { class: "table-scroll" }, table));
}

// ---- summary band
function renderSummary() {
  const s = state.summary;
  if (!s) return;
  const card = (title, big, ...rest) => el("section", { class: "card", "aria-label": title }, el("h3", { text: title }), el("p", { class: "big", text: big }), ...rest);
  const list = (rows) => el("ul", {}, ...rows.map(([a, b]) => el("li", {}, el("span", { text: a }), el("span", { text: b }))));
  const unhealthy = card("Unhealthy GPUs", count(s.unhealthy),
    s.unhealthy ? el("p", {}, link("#fleet?unhealthy=1", "Show them")) : el("p", { class: "help", text: "none" }));
  if (s.unhealthy) unhealthy.classList.add("alert");
  const memPct = s.memoryMiB ? s.memoryPromisedMiB / s.memoryMiB : 0;
  $("#summary").replaceChildren(
    card("GPUs", count(s.gpus), list(s.byModel.map((m) => [m.name, `${count(m.gpus)} (${count(m.inUse)} in use)`]))),
    card("By mode", `${count(s.byMode.reduce((a, m) => a + m.inUse, 0))} in use`, list(s.byMode.map((m) => [modeName(m.name), `${count(m.gpus)} (${count(m.inUse)} in use)`]))),
    card("Nodes", count(s.nodes), list([...Object.entries(s.nodesByState).map(([k, v]) => [k, count(v)]), ...s.byPool.slice(0, 4).map((p) => ["pool " + p.name, count(p.gpus) + " GPUs"])])),
    card("Memory promised", pct(memPct), el("meter", { min: 0, max: 1, value: memPct.toFixed(3), "aria-label": "memory promised " + pct(memPct) }),
      list([["promised", mib(s.memoryPromisedMiB)], ["used", mib(s.memoryUsedMiB)], ["of", mib(s.memoryMiB)]])),
    card("Compute promised", `${num(s.computePromised)} of ${count(s.computeGPUs)} GPUs`, list([["share", pct(s.computeGPUs ? s.computePromised / s.computeGPUs : 0)]])),
    card(state.viewer ? "Your claims" : "Claims", `${count(s.liveClaims)} live`, list([["pending", count(s.pending)]].concat(state.viewer ? [] : [["tenants holding GPUs", count(s.tenants || 0)]])),
      el("p", {}, link("#claims", "Claims"))),
    unhealthy,
    card(state.viewer ? "Your cost" : "Cost", usd(s.costPerHour) + " / hour", list([["per month", usd(s.costPerHour * 730)], ["whole fleet", usd(s.fleetPerHour) + " / hour"]])));
}

// ---- GPU page
async function showGPU(r) {
  const [node, index] = r.arg;
  $("#gpu-title").textContent = `GPU ${index} on ${node}`;
  const body = $("#gpu-body");
  body.replaceChildren(el("p", { text: "Loading…" }));
  const v = await api(`/v1/fleet/gpus/${encodeURIComponent(node)}/${encodeURIComponent(index)}`);
  const g = v.gpu;
  $("#gpu-title").textContent = `GPU ${g.index} on ${v.node.name} · ${g.model}` + (g.healthy ? "" : " · UNHEALTHY");
  const facts = el("dl", { class: "facts" });
  const fact = (k, ...val) => facts.append(el("dt", { text: k }), el("dd", {}, ...val));
  fact("Node", `${v.node.name} (${v.node.state}${v.node.simulated ? ", simulated GPUs" : ""})`, v.node.pool ? ` · pool ${v.node.pool}` : "");
  fact("UUID", el("code", { text: g.uuid }));
  fact("Model", `${g.productName || g.model}, ${mib(g.memoryMiB)}` + (g.memorySlices ? `, ${g.memorySlices} memory slices, ${g.computeSlices} compute slices` : ""));
  fact("Health", g.healthy ? "healthy" : el("strong", { class: "bad", text: "unhealthy" }));
  fact("MIG", g.mig ? "on" : g.memorySlices ? "off" : "not supported");
  const mem = el("div", { id: "chart-gpu-mem", class: "chart" });
  const claims = claimsTable(v.claims, "Claims that hold or held this GPU, newest first" + (state.viewer ? " (yours only; others appear as shares above)" : ""));
  body.replaceChildren(facts, renderGPU(v.node, g),
    el("div", { class: "charts" }, el("figure", {}, el("figcaption", { text: "Memory promised and used on this GPU" }), mem)),
    el("h3", { text: "Claims" }), claims, el("h3", { text: "Events on this node" }), eventList(v.events, true));
  const pts = (f) => v.history.map((p) => [Date.parse(p.time), f(p)]);
  lineChart(mem, [{ name: "promised", color: PALETTE[2], points: pts((p) => p.promisedMiB / 1024) },
    { name: "used (processes)", color: PALETTE[1], points: pts((p) => (p.usedMiB < 0 ? null : p.usedMiB / 1024)) }],
  { unit: "GiB", max: g.memoryMiB / 1024 });
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
  for (let i = 0; i < slices; i++) {
    s.append(svg("rect", { x: 1 + i * sw, y: top, width: sw, height: H - top, "stroke-dasharray": "3 3", class: "slot" }));
    if (g.memorySlices) s.append(svg("text", { x: 1 + i * sw + sw / 2, y: H + 14, "text-anchor": "middle", "font-size": 11, class: "muted", text: String(i) }));
  }
  const list = el("ul", { class: "shares" });
  const names = [...new Set(g.devices.flatMap((d) => (d.claims || []).map((c) => c.tenant)).filter(Boolean))].sort();
  for (const d of g.devices) {
    const x = 1 + d.start * sw, w = d.size * sw;
    const grp = svg("g", { class: "device", "data-device": d.id, "data-profile": d.profile || "", "data-start": d.start, "data-size": d.size,
      "data-mode": d.mode, "data-planned": d.planned ? "true" : "false" });
    grp.append(svg("rect", { x: x + 1, y: top + 1, width: w - 2, height: H - top - 2, class: "dev" + (g.healthy ? "" : " sick"), "stroke-dasharray": d.planned ? "6 3" : null }));
    grp.append(svg("text", { x: x + 6, y: top + 16, "font-size": 12, text: `${deviceLabel(d)} · ${modeName(d.mode)}${d.planned ? " (planned)" : ""}` }));
    let mx = x + 4, cx = x + 4;
    const bw = w - 8;
    grp.append(svg("text", { x: x + 6, y: top + 33, "font-size": 10, class: "muted", text: "memory" }));
    grp.append(svg("text", { x: x + 6, y: top + 63, "font-size": 10, class: "muted", text: "compute" }));
    for (const c of d.claims || []) {
      const color = c.tenant ? PALETTE[names.indexOf(c.tenant) % PALETTE.length] : css("--other");
      const tip = `${shareWho(c)}: ${mib(c.memoryMiB)} (${pct(c.memoryShare)} of memory), ${pct(c.computeShare)} of compute` +
        (c.usedMiB >= 0 ? `, using ${mib(c.usedMiB)}` : "");
      const mw = Math.max(2, bw * c.memoryShare), cw = Math.max(2, bw * c.computeShare);
      grp.append(svg("rect", { x: mx, y: top + 36, width: mw, height: 14, fill: color, stroke: "#fff", class: "share share-memory",
        "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, svg("title", { text: tip })));
      grp.append(svg("rect", { x: cx, y: top + 66, width: cw, height: 14, fill: color, stroke: "#fff", class: "share share-compute",
        "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, svg("title", { text: tip })));
      mx += mw; cx += cw;
      const li = el("li", { "data-claim": c.claim || "", "data-tenant": c.tenant || "" }, `${deviceLabel(d)} · ${modeName(d.mode)} · `);
      if (c.claim) li.append(link("#claim/" + encodeURIComponent(c.claim), c.claim), " of ", link("#tenant/" + encodeURIComponent(c.tenant), c.tenant), `: ${tip.slice(tip.indexOf(":") + 2)}`);
      else li.append(tip);
      list.append(li);
    }
    summary.push(`${deviceLabel(d)} ${modeName(d.mode)}${d.planned ? " planned" : ""}: ` + ((d.claims || []).map(shareWho).join(", ") || "free"));
    s.append(grp);
  }
  s.setAttribute("aria-label", `GPU ${g.index} ${g.model}${g.healthy ? "" : " unhealthy"}: ` + summary.join("; "));
  box.append(s, list);
  return box;
}
function deviceLabel(d) { return d.profile ? d.profile + " @" + d.start : "whole GPU"; }
function shareWho(s) { return s.tenant ? s.tenant + " " + s.claim : "another tenant"; }

// ---- claims (tables shared by the views)
function asks(c) {
  return (c.spec.requests || []).map((r) => {
    const parts = [];
    if ((r.count || 1) > 1) parts.push(r.count + "×");
    if (r.memoryMiB) parts.push(mib(r.memoryMiB));
    if (r.computePercent) parts.push(r.computePercent + "% compute");
    if (r.mode && r.mode !== "auto") parts.push(modeName(r.mode));
    if (r.profile) parts.push(r.profile);
    return parts.join(" ") || "a GPU";
  }).join("; ");
}
function devicesOf(c) { return (c.allocation && c.allocation.devices) || []; }
function claimsTable(claims, caption) {
  const body = el("tbody");
  for (const c of claims) {
    const devs = devicesOf(c);
    body.append(el("tr", { "data-claim": c.id },
      el("td", {}, link("#claim/" + encodeURIComponent(c.id), c.id)), el("td", {}, link("#tenant/" + encodeURIComponent(c.tenant), c.tenant)),
      el("td", { text: c.state }), el("td", { text: devs.map((d) => d.node + " " + (d.profile ? d.profile + "@" + (d.start ?? 0) : "whole GPU")).join(", ") || "—" }),
      el("td", { text: asks(c) }), el("td", { class: "reason", text: c.reason || "" })));
  }
  if (!claims.length) body.append(el("tr", {}, el("td", { colspan: 6, text: "None." })));
  return el("div", { class: "table-scroll" }, el("table", {}, el("caption", { text: caption }),
    el("thead", {}, el("tr", {}, ...["Claim", "Tenant", "State", "Devices", "Asks", "Reason"].map((h) => el("th", { scope: "col", text: h })))), body));
}
function eventList(evs, newestFirst) {
  const ol = el("ol", { class: "events" });
  for (const e of evs) {
    const li = el("li", { "data-kind": e.kind }, `${hhmmss(e.time)} ${e.kind}`);
    if (e.claim) li.append(" ", link("#claim/" + encodeURIComponent(e.claim), e.claim));
    if (e.tenant && !state.viewer) li.append(" (", link("#tenant/" + encodeURIComponent(e.tenant), e.tenant), ")");
    if (e.node) li.append(" on " + e.node);
    li.append(": " + e.message);
    ol.append(li);
  }
  if (!evs.length) ol.append(el("li", { text: "No events." }));
  if (newestFirst) ol.setAttribute("reversed", "");
  return ol;
}

// ---- tenant page
async function showTenant(r) {
  const name = r.arg[0] || "";
  $("#tenant-title").textContent = "Tenant " + name;
  const body = $("#tenant-body");
  body.replaceChildren(el("p", { text: "Loading…" }));
  const v = await api(`/v1/dashboard/tenants/${encodeURIComponent(name)}?points=240`);
  const t = v.tenant, u = t.usage, cost = t.cost;
  const facts = el("dl", { class: "facts" });
  const fact = (k, val) => facts.append(el("dt", { text: k }), el("dd", { text: val }));
  fact("Live claims", `${u.claims} (${t.pending} pending)`);
  fact("Memory held", mib(u.memoryMiB) + " of " + (t.memoryQuotaMiB ? mib(t.memoryQuotaMiB) + " quota" : "no quota"));
  fact("Compute held", u.computePercent + "%" + (t.computeQuotaPercent ? ` of ${t.computeQuotaPercent}% quota` : ""));
  fact("Used so far", `${num(u.gpuSeconds)} GPU-seconds, ${num(u.memoryMiBSeconds / 1024)} GiB-seconds`);
  fact("Cost", `${usd(cost.perHour)} per hour, ${usd(cost.perMonth)} per month (dedicated GPUs: ${usd(cost.dedicatedPerHour)} per hour)`);
  const memChart = el("div", { id: "chart-tenant-mem", class: "chart" }), gpuChart = el("div", { id: "chart-tenant-gpusec", class: "chart" });
  body.replaceChildren(facts,
    el("p", {}, link(`#fleet?tenant=${encodeURIComponent(t.name)}`, "Show its GPUs on the fleet map")),
    el("div", { class: "charts" },
      el("figure", {}, el("figcaption", { text: "Memory held over time" }), memChart),
      el("figure", {}, el("figcaption", { text: "GPU-seconds used, cumulative" }), gpuChart)),
    el("h3", { text: "Claims" }), claimsTable(v.claims, "Its pending and live claims"),
    el("h3", { text: "Events" }), eventList(v.events, true));
  const pts = (f) => v.series.map((x) => [Date.parse(x.time), f(x.tenants[t.name] || {})]);
  const mem = [{ name: "memory held", color: PALETTE[0], points: pts((x) => (x.memoryMiB || 0) / 1024) }];
  if (t.memoryQuotaMiB) mem.push({ name: "quota", color: PALETTE[1], points: pts(() => t.memoryQuotaMiB / 1024) });
  lineChart(memChart, mem, { unit: "GiB" });
  lineChart(gpuChart, [{ name: "GPU-seconds", color: PALETTE[2], points: pts((x) => x.gpuSeconds || 0) }], { unit: "GPU-s" });
}

// ---- claim page
async function showClaim(r) {
  const id = r.arg[0] || "";
  $("#claim-title").textContent = "Claim " + id;
  const body = $("#claim-body");
  body.replaceChildren(el("p", { text: "Loading…" }));
  const [c, evs] = await Promise.all([api("/v1/claims/" + encodeURIComponent(id)), api("/v1/claims/" + encodeURIComponent(id) + "/events")]);
  const facts = el("dl", { class: "facts" });
  const fact = (k, ...val) => facts.append(el("dt", { text: k }), el("dd", {}, ...val));
  fact("Tenant", link("#tenant/" + encodeURIComponent(c.tenant), c.tenant));
  fact("State", c.state + (c.queuePosition ? ` — number ${c.queuePosition} in the queue` : ""));
  fact(c.state === "pending" ? "Why it waits" : "Reason", el("span", { class: "reason", text: c.reason || (c.state === "pending" ? "not tried yet" : "—") }));
  fact("Asks", asks(c));
  fact("Created", new Date(c.created).toLocaleString("en-GB"));
  const devs = el("ul");
  for (const d of devicesOf(c)) {
    const li = el("li", {}, `${d.profile ? d.profile + " @" + d.start : "whole GPU"} · ${modeName(d.mode === "mig" ? "exclusive" : d.mode)} · ${mib(d.memoryMiB)}` +
      (d.computePercent ? `, ${d.computePercent}% compute` : "") + " on ");
    const a = link("#fleet?node=" + encodeURIComponent(d.node), d.node);
    li.append(a);
    devs.append(li);
    gpuIndex(d.node, d.gpu).then((i) => { if (i >= 0) { a.setAttribute("href", `#gpu/${encodeURIComponent(d.node)}/${i}`); a.textContent = `${d.node} GPU ${i}`; } }).catch(() => {});
  }
  if (!devs.children.length) devs.append(el("li", { text: "none yet" }));
  body.replaceChildren(facts, el("h3", { text: "Devices" }), devs, el("h3", { text: "History" }), eventList(evs, false));
}
async function gpuIndex(node, uuid) {
  const f = await api("/v1/fleet?limit=1&node=" + encodeURIComponent(node));
  for (const n of f.nodes) for (const g of n.gpus) if (g.uuid === uuid) return g.index;
  return -1;
}

// ---- claims view
async function showClaims() {
  await loadClaims();
  startEvents();
}
async function loadClaims(more) {
  const pending = await api("/v1/claims?state=pending&limit=200");
  const live = await api("/v1/claims?state=allocated&state=running&limit=200" + (more && state.liveCursor ? "&after=" + state.liveCursor : ""));
  state.liveCursor = live.next || "";
  state.claims = pending.concat(live);
  state.claims.more = !!(pending.next || live.next);
  renderClaims(!!more);
}
function renderClaims(append) {
  const pend = $("#pending tbody"), run = $("#running tbody");
  pend.replaceChildren();
  if (!append) run.replaceChildren();
  const pending = state.claims.filter((c) => c.state === "pending").sort((a, b) => (a.queuePosition || 0) - (b.queuePosition || 0));
  for (const c of pending) {
    pend.append(el("tr", { "data-claim": c.id },
      el("td", { class: "num", text: c.queuePosition || "" }), el("td", {}, link("#claim/" + encodeURIComponent(c.id), c.id)),
      el("td", {}, link("#tenant/" + encodeURIComponent(c.tenant), c.tenant)), el("td", { text: asks(c) }), el("td", { class: "reason", text: c.reason || "not tried yet" })));
  }
  if (!pending.length) pend.append(el("tr", {}, el("td", { colspan: 5, text: "No claim is waiting." })));
  const live = state.claims.filter((c) => c.state !== "pending");
  for (const c of live) {
    const devs = devicesOf(c);
    const promised = devs.reduce((a, d) => a + d.memoryMiB, 0);
    const compute = devs.reduce((a, d) => a + (d.computePercent || 0), 0);
    let comp = compute ? compute + "% promised" : "no compute promise";
    if (c.used && c.used.gpuSeconds > 0 && c.used.smSeconds > 0) comp += `, ${Math.round(100 * c.used.smSeconds / c.used.gpuSeconds)}% used on average`;
    run.append(el("tr", { "data-claim": c.id },
      el("td", {}, link("#claim/" + encodeURIComponent(c.id), c.id)), el("td", {}, link("#tenant/" + encodeURIComponent(c.tenant), c.tenant)), el("td", { text: c.state }),
      el("td", { text: devs.map((d) => d.node + " " + (d.profile ? d.profile + "@" + (d.start ?? 0) : d.device)).join(", ") }),
      el("td", { text: [...new Set(devs.map((d) => (d.mode === "mig" ? "exclusive (MIG)" : modeName(d.mode))))].join(", ") }),
      el("td", { text: "— / " + mib(promised) }), el("td", { text: comp })));
  }
  if (!run.children.length) run.append(el("tr", {}, el("td", { colspan: 7, text: "No claim holds a device." })));
  $("#claims-more").hidden = !state.liveCursor;
  renderEvents();
}
function renderEvents() {
  $("#events").replaceChildren(...eventList(state.events.slice(-100).reverse(), true).children);
}
// The claims view follows GET /v1/events from a little before the newest.
function startEvents() {
  if (state.events$) return;
  const ctrl = new AbortController();
  state.events$ = ctrl;
  const since = state.lastSeq || Math.max(0, ((state.summary && state.summary.eventSeq) || 0) - 100);
  fetch("/v1/events?since=" + since, { headers: { Authorization: "Bearer " + state.token }, signal: ctrl.signal }).then(async (r) => {
    if (!r.ok) throw new Error("event stream: HTTP " + r.status);
    await sse(r, (_, data) => {
      const ev = JSON.parse(data);
      state.lastSeq = Math.max(state.lastSeq, ev.seq);
      state.events.push(ev);
      if (state.events.length > 200) state.events.shift();
      if (state.route.view === "claims") renderEvents();
      changed();
    });
  }).catch(() => {}).finally(() => {
    if (state.events$ === ctrl) { state.events$ = null; if (state.route.view === "claims" && state.token) setTimeout(startEvents, 2000); }
  });
}
function stopEvents() {
  if (state.events$) state.events$.abort();
  state.events$ = null;
}

// ---- tenants view
async function showTenants(r) {
  const q = $("#t-q").value.trim(), sort = $("#t-sort").value;
  const after = r && r.after !== undefined ? r.after : state.tenantsAfter;
  const points = Math.max(60, Math.min(480, Math.round(($("#chart-util").clientWidth || 480) / 3)));
  const d = await api(`/v1/dashboard?limit=50&points=${points}&sort=${encodeURIComponent(sort)}` + (q ? "&q=" + encodeURIComponent(q) : "") + (after ? "&after=" + encodeURIComponent(after) : ""));
  state.dash = d;
  state.tenantsAfter = after || "";
  renderTenants();
}
function renderTenants() {
  const d = state.dash, body = $("#tenants tbody");
  body.replaceChildren();
  for (const t of d.tenants) {
    const u = t.usage, cost = t.cost;
    const quota = t.memoryQuotaMiB ? mib(t.memoryQuotaMiB) : "no limit";
    const note = cost.unpriced && cost.unpriced.length ? " (no price for " + cost.unpriced.join(", ") + ")" : "";
    const i = d.chartTenants.indexOf(t.name);
    const sw = el("span", { class: "swatch", "aria-hidden": "true" });
    if (i >= 0) sw.style.background = PALETTE[i % PALETTE.length]; else sw.hidden = true;
    body.append(el("tr", { "data-tenant": t.name },
      el("th", { scope: "row" }, sw, " ", link("#tenant/" + encodeURIComponent(t.name), t.name)),
      el("td", { class: "num", text: u.claims }), el("td", { class: "num", text: t.pending }),
      el("td", { text: mib(u.memoryMiB) + " / " + quota + (t.computeQuotaPercent ? `, compute ${u.computePercent}% / ${t.computeQuotaPercent}%` : "") }),
      el("td", { class: "num", text: num(u.gpuSeconds) }), el("td", { class: "num", text: num(u.memoryMiBSeconds / 1024) }),
      el("td", { class: "num", text: usd(cost.perHour) + note }), el("td", { class: "num", text: usd(cost.perMonth) }),
      el("td", { class: "num", text: usd(cost.dedicatedPerHour) }), el("td", { class: "num", text: usd(cost.dedicatedPerMonth) })));
  }
  if (!d.tenants.length) body.append(el("tr", {}, el("td", { colspan: 10, text: "No tenant matches." })));
  $("#t-next").disabled = !d.next;
  $("#t-first").disabled = !state.tenantsAfter;
  $("#t-count").textContent = `${count(d.totalTenants)} tenants` + (d.next || state.tenantsAfter ? ", 50 a page" : "");
  renderTenantCharts();
}
function renderTenantCharts() {
  const d = state.dash;
  if (!d) return;
  const ser = d.series || [];
  const pts = (f) => ser.map((x) => [Date.parse(x.time), f(x)]);
  const ratio = (a, b) => (b > 0 ? (100 * a) / b : 0);
  lineChart($("#chart-util"), [
    { name: "memory promised", color: PALETTE[2], points: pts((x) => ratio(x.memoryPromisedMiB, x.memoryMiB)) },
    { name: "compute promised", color: PALETTE[1], points: pts((x) => ratio(x.computePromised, x.gpus)) },
    { name: "memory used", color: PALETTE[0], points: pts((x) => ratio(x.memoryUsedMiB, x.memoryMiB)) },
    { name: "GPUs in use", color: PALETTE[4], points: pts((x) => ratio(x.gpusInUse, x.gpus)) }], { unit: "%", max: 100 });
  lineChart($("#chart-pending"), [{ name: "pending claims", color: PALETTE[1], points: pts((x) => x.pending) }], { unit: "claims", integer: true });
  const names = d.chartTenants;
  lineChart($("#chart-gpusec"), names.map((n, i) => ({ name: n, color: PALETTE[i % PALETTE.length], points: pts((x) => ((x.tenants || {})[n] || {}).gpuSeconds || 0) })), { unit: "GPU-s" });
  lineChart($("#chart-mem"), names.map((n, i) => ({ name: n, color: PALETTE[i % PALETTE.length], points: pts((x) => (((x.tenants || {})[n] || {}).memoryMiB || 0) / 1024) })), { unit: "GiB" });
}

// ---- charts: SVG sized to their card, time ticks, units, legend and a hover readout inside the card
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((s) => s * 1000);
function timeTicks(t0, t1, max) {
  const step = TIME_STEPS.find((s) => (t1 - t0) / s <= max) || TIME_STEPS[TIME_STEPS.length - 1];
  const off = new Date(t0).getTimezoneOffset() * 60000;
  const ticks = [];
  for (let t = Math.ceil((t0 - off) / step) * step + off; t <= t1; t += step) ticks.push(t);
  return { ticks, step };
}
function timeLabel(t, step) {
  const d = new Date(t);
  const hm = d.toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit" });
  return step < 60000 ? hm + ":" + String(d.getSeconds()).padStart(2, "0") : hm;
}
function niceStep(range, max) {
  const raw = range / Math.max(1, max);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
const charts = new Map();
function rerenderCharts() { for (const [root, args] of charts) if (root.isConnected) lineChart(root, ...args); else charts.delete(root); }
let resizeObs = null;
function lineChart(root, series, opts) {
  opts = opts || {};
  charts.set(root, [series, opts]);
  if (!resizeObs && window.ResizeObserver) {
    resizeObs = new ResizeObserver((entries) => {
      for (const e of entries) {
        const args = charts.get(e.target);
        if (args && Math.abs((e.target.dataset.width || 0) - e.contentRect.width) > 4) lineChart(e.target, ...args);
      }
    });
  }
  if (resizeObs) resizeObs.observe(root);
  const W = Math.max(200, Math.floor(root.clientWidth || 400));
  root.dataset.width = W;
  const H = W < 360 ? 170 : 210;
  let t0 = Infinity, t1 = -Infinity, vmax = 0;
  for (const s of series) for (const [t, v] of s.points) { if (v === null) continue; t0 = Math.min(t0, t); t1 = Math.max(t1, t); vmax = Math.max(vmax, v); }
  if (!(t1 > t0)) { t0 = (isFinite(t0) ? t0 : Date.now()) - 60000; t1 = t0 + 60000; }
  const top = opts.max || (vmax > 0 ? vmax * 1.05 : 1);
  const ystep = opts.integer ? Math.max(1, Math.ceil(niceStep(top, 4))) : niceStep(top, 4);
  const ymax = opts.max || Math.ceil(top / ystep) * ystep;
  const fmt = (v) => (ystep < 1 ? String(Number(v.toFixed(3))) : num(v));
  const labelW = Math.max(...[0, ymax / 2, ymax].map((v) => fmt(v).length)) * 7 + 10;
  const L = Math.max(34, labelW), R = 10, T = 18, B = 24;
  const X = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R), Y = (v) => T + (1 - Math.min(v, ymax) / ymax) * (H - T - B);
  const latest = series.map((s) => { const p = s.points.filter((q) => q[1] !== null); return `${s.name} ${p.length ? fmt(p[p.length - 1][1]) : "no data"} ${opts.unit || ""}`; });
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "Latest: " + latest.join(", ") });
  for (let v = 0; v <= ymax + 1e-9; v += ystep) {
    const y = Y(v);
    s.append(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
    s.append(svg("text", { x: L - 5, y: y + 4, "text-anchor": "end", text: fmt(v) }));
  }
  s.append(svg("text", { x: 2, y: 11, text: opts.unit || "" }));
  s.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  const { ticks, step } = timeTicks(t0, t1, Math.max(2, Math.floor((W - L - R) / 70)));
  for (const t of ticks) {
    const x = X(t);
    s.append(svg("line", { x1: x, x2: x, y1: H - B, y2: H - B + 4, class: "axis" }));
    const anchor = x < L + 20 ? "start" : x > W - R - 20 ? "end" : "middle";
    s.append(svg("text", { x, y: H - B + 16, "text-anchor": anchor, text: timeLabel(t, step) }));
  }
  series.forEach((ser, i) => {
    const segs = [];
    let cur = [];
    for (const [t, v] of ser.points) { if (v === null) { if (cur.length) segs.push(cur); cur = []; } else cur.push(X(t).toFixed(1) + "," + Y(v).toFixed(1)); }
    if (cur.length) segs.push(cur);
    for (const seg of segs) {
      s.append(svg("polyline", { points: seg.join(" "), fill: "none", stroke: ser.color, "stroke-width": 2, "stroke-dasharray": DASHES[i % DASHES.length] || null,
        "data-series": ser.name }, svg("title", { text: ser.name })));
    }
  });
  const cross = svg("line", { x1: 0, x2: 0, y1: T, y2: H - B, class: "cross", visibility: "hidden" });
  s.append(cross);
  const keys = el("ul", { class: "keys" });
  series.forEach((ser, i) => {
    const k = svg("svg", { viewBox: "0 0 26 10", "aria-hidden": "true" }, svg("line", { x1: 1, x2: 25, y1: 5, y2: 5, stroke: ser.color, "stroke-width": 2.5, "stroke-dasharray": DASHES[i % DASHES.length] || null }));
    keys.append(el("li", { "data-key": ser.name }, k, ser.name));
  });
  const readout = el("div", { class: "readout", hidden: true });
  s.addEventListener("mousemove", (ev) => {
    const r = s.getBoundingClientRect();
    const x = ((ev.clientX - r.left) / r.width) * W;
    if (x < L || x > W - R) { readout.hidden = true; cross.setAttribute("visibility", "hidden"); return; }
    const t = t0 + ((x - L) / (W - L - R)) * (t1 - t0);
    const lines = [hhmmss(t)];
    for (const ser of series) {
      let best = null;
      for (const p of ser.points) if (p[1] !== null && (!best || Math.abs(p[0] - t) < Math.abs(best[0] - t))) best = p;
      if (best) lines.push(`${ser.name}: ${fmt(best[1])} ${opts.unit || ""}`);
    }
    readout.replaceChildren(...lines.map((l) => el("div", { text: l })));
    readout.hidden = false;
    cross.setAttribute("x1", x); cross.setAttribute("x2", x); cross.setAttribute("visibility", "visible");
  });
  s.addEventListener("mouseleave", () => { readout.hidden = true; cross.setAttribute("visibility", "hidden"); });
  root.replaceChildren(s, keys, readout);
}

// ---- wiring
document.addEventListener("DOMContentLoaded", () => {
  applyTheme(initialTheme());
  $("#theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem(THEME_KEY, next);
    applyTheme(next);
    renderLegend();
  });
  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    $("#login-error").textContent = "";
    signIn($("#token").value.trim()).catch((e) => { $("#login-error").textContent = e.message; $("#token").focus(); });
  });
  $("#logout").addEventListener("click", () => signOut("Signed out."));
  for (const b of document.querySelectorAll("#nav button")) {
    b.addEventListener("click", () => go(b.dataset.view === "fleet" ? state.fleetHash : "#" + b.dataset.view));
  }
  for (const h of document.querySelectorAll(".view h2")) h.setAttribute("tabindex", "-1");
  window.addEventListener("hashchange", () => route(true));
  // filters
  let typing = 0;
  $("#filters").addEventListener("input", (ev) => {
    clearTimeout(typing);
    typing = setTimeout(writeFilters, ev.target.tagName === "INPUT" && ev.target.type !== "checkbox" ? 200 : 0);
  });
  $("#filters").addEventListener("submit", (ev) => { ev.preventDefault(); writeFilters(); });
  $("#f-clear").addEventListener("click", () => {
    for (const k of FILTERS) { const i = $("#f-" + k); if (i.type === "checkbox") i.checked = false; else if (i.tagName === "SELECT") i.selectedIndex = 0; else i.value = ""; }
    writeFilters();
  });
  // the map
  const canvas = $("#grid");
  canvas.addEventListener("mousemove", (ev) => { const [x, y] = canvasPoint(ev); showTip(cellAt(x, y), ev); });
  canvas.addEventListener("mouseleave", () => { $("#tip").hidden = true; });
  canvas.addEventListener("click", (ev) => { const [x, y] = canvasPoint(ev); const i = cellAt(x, y); if (i >= 0) openCell(i); });
  canvas.addEventListener("focus", () => { if (state.focus < 0) moveFocus(0); });
  canvas.addEventListener("keydown", (ev) => {
    if (!state.view || !state.view.cells.length) return;
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: rowStep(), ArrowUp: -Math.max(1, rowStep()), Home: -1e9, End: 1e9 }[ev.key];
    if (step !== undefined) { ev.preventDefault(); moveFocus(Math.max(0, state.focus) + step); }
    else if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); if (state.focus >= 0) openCell(state.focus); }
  });
  window.addEventListener("scroll", drawGrid, { passive: true });
  let resizing = 0;
  window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(() => applyFilters(true), 100); });
  // claims and tenants
  $("#claims-more").addEventListener("click", () => loadClaims(true).catch(report));
  let tq = 0;
  $("#t-q").addEventListener("input", () => { clearTimeout(tq); tq = setTimeout(() => showTenants({ after: "" }).catch(report), 250); });
  $("#tenant-filters").addEventListener("submit", (ev) => { ev.preventDefault(); showTenants({ after: "" }).catch(report); });
  $("#t-sort").addEventListener("change", () => showTenants({ after: "" }).catch(report));
  $("#t-next").addEventListener("click", () => { if (state.dash && state.dash.next) showTenants({ after: state.dash.next }).catch(report); });
  $("#t-first").addEventListener("click", () => showTenants({ after: "" }).catch(report));
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved).catch(() => signOut("Your saved token was refused; sign in again."));
  else $("#token").focus();
});
