// osm-vm dashboard: polls the debug listener's /debug/dashboard with the
// admin token (from the URL fragment #token=..., which browsers never send
// to a server, or typed in) and redraws what changed. Plain DOM, no
// libraries; every text is escaped.
"use strict";

const stateURL = "/debug/dashboard";
const pollMillis = 1000;
let token = sessionStorage.getItem("osm-admin-token") || "";
let etag = "";
let state = null;
// What the page measures of itself (read by e2e/browser/scale.mjs): the
// renders, their total time, and the first and last render's time from
// the state's arrival to the next painted frame, with each section's
// own script time.
window.osmDashboard = { renders: 0, renderMillis: 0, firstRender: null, last: null };

const m = /[#&]token=([^&]+)/.exec(location.hash);
if (m) {
  token = decodeURIComponent(m[1]);
  sessionStorage.setItem("osm-admin-token", token);
  history.replaceState(null, "", location.pathname + location.search);
}

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const $ = (id) => document.getElementById(id);
const ago = (t) => { if (!t) return "never"; const s = Math.round((Date.now() - Date.parse(t)) / 1000); return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago"; };
const left = (t) => { const s = (Date.parse(t) - Date.now()) / 1000; if (s < 0) return "expired"; if (s < 7200) return Math.round(s / 60) + " min"; if (s < 172800) return Math.round(s / 3600) + " h"; return Math.round(s / 86400) + " days"; };

function setStatus(text, error) { const s = $("status"); s.textContent = text; s.className = error ? "error" : ""; }

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("osm-admin-token", token);
  $("login").hidden = true;
  poll();
});

// poll asks for the state with the ETag of the one it has: the server
// answers 304, with no body, while nothing changed.
async function poll() {
  if (!token) { $("login").hidden = false; setStatus("the admin token is needed", true); return; }
  try {
    const headers = { Authorization: "Bearer " + token };
    if (etag) headers["If-None-Match"] = etag;
    const r = await fetch(stateURL, { headers, cache: "no-store" });
    if (r.status === 401) { $("login").hidden = false; setStatus("the admin token was refused", true); return; }
    if (r.status === 304) {
      timed(() => render(state, false));
    } else if (!r.ok) {
      throw new Error(r.status + " " + r.statusText);
    } else {
      const s = await r.json();
      etag = r.headers.get("ETag") || "";
      state = s;
      timed(() => render(s, true));
    }
    setStatus("live · updated " + new Date().toLocaleTimeString());
  } catch (err) {
    setStatus("not reachable: " + err.message, true);
  }
  setTimeout(poll, pollMillis);
}

// timed runs f, which returns the sections it drew and their script
// times, and records its time to the next painted frame when it drew any.
function timed(f) {
  const t0 = performance.now();
  const sections = f();
  if (!Object.keys(sections).length) return;
  requestAnimationFrame(() => setTimeout(() => {
    const m = window.osmDashboard, millis = Math.round(performance.now() - t0);
    m.renders++; m.renderMillis += millis; m.last = { millis, sections };
    if (!m.firstRender) m.firstRender = m.last;
  }));
}

// Each section is drawn from part of the state, and again only when that
// part changed, or, for those that show relative times, when refresh
// milliseconds passed: a split change redraws the splits, not a thousand
// services.
const sections = [
  { id: "warnings", of: (s) => s.warnings, draw: drawWarnings },
  { id: "graph", of: (s) => [s.permissive, s.edgesTruncated, s.services.map((v) => [v.name, v.inSpec]), s.edges], draw: renderGraph },
  { id: "splits", of: (s) => s.splits, draw: drawSplits },
  { id: "services", of: (s) => s.services, draw: drawServices },
  // The chosen Service's detail is fetched again when its ejections
  // change and every few seconds (a policy change is not in the state).
  { id: "resilience", of: (s) => [s.services.filter((v) => v.inSpec).map((v) => v.name), s.services.map((v) => v.ejected || [])], draw: drawResilience, refresh: 5000 },
  { id: "proxies", of: (s) => s.proxies, draw: drawProxies, refresh: 1000 },
  { id: "certificates", of: (s) => [s.ca, s.certificates], draw: drawCertificates, refresh: 60000 },
  { id: "providers", of: (s) => s.providers, draw: drawProviders, refresh: 1000 },
];
const drawn = {}; // id -> { key, at }

// render draws the sections of s that changed (changed: s is new) or are
// due a refresh; it returns the script milliseconds of each drawn.
function render(s, changed) {
  const out = {}, now = Date.now();
  for (const sec of sections) {
    const last = drawn[sec.id];
    let key = last?.key;
    if (changed) key = JSON.stringify(sec.of(s));
    const due = sec.refresh && now - last?.at >= sec.refresh && sec.of(s).length > 0;
    if (last && key === last.key && !due) continue;
    const t0 = performance.now();
    sec.draw(s);
    out[sec.id] = Math.round(performance.now() - t0);
    drawn[sec.id] = { key, at: now };
  }
  return out;
}

function drawWarnings(s) {
  $("warnings").innerHTML = s.warnings.map((w) => `<div class="warning">⚠ ${esc(w)}</div>`).join("");
}

function drawSplits(s) {
  $("splits").innerHTML = s.splits.length ? s.splits.map((sp) => {
    const total = sp.backends.reduce((a, b) => a + b.weight, 0) || 1;
    return `<div data-split="${esc(sp.root)}"><b>${esc(sp.root)}</b> (${esc(sp.policy)})<table>` +
      sp.backends.map((b) => `<tr data-backend="${esc(b.service)}"><td>${esc(b.service)}</td><td><span class="bar" data-width="${Math.round(200 * b.weight / total)}"></span><span class="weight">${b.weight}</span> (${Math.round(100 * b.weight / total)}%)</td></tr>`).join("") +
      `</table></div>`;
  }).join("") : "No TrafficSplits.";
  // Widths through the CSSOM: the page's CSP refuses inline style attributes.
  for (const bar of $("splits").querySelectorAll(".bar")) bar.style.width = bar.dataset.width + "px";
}

function drawServices(s) {
  $("services").innerHTML = "<tr><th>Service</th><th>Account</th><th>VIP</th><th>Endpoints (provider, health)</th></tr>" +
    s.services.map((v) => `<tr><td>${esc(v.name)}${v.inSpec ? "" : " <i>(no Service document)</i>"}</td><td>${esc(v.serviceAccount || "")}</td><td>${esc(v.vip || "")}</td><td>` +
      (v.endpoints.length ? v.endpoints.map((e) => `${esc(e.address)} <small>${esc(e.provider)}</small> <span class="health-${esc(e.health)}">${esc(e.health)}</span>`).join("<br>") : "none") +
      (v.ejected || []).map((e) => `<br><span class="ejected" data-ejected="${esc(v.name + " " + e.backend)}">ejected ${esc(e.backend)}</span> <small>by ${esc(e.by.join(", "))}</small>`).join("") + "</td></tr>").join("");
}

// drawResilience lists the Services to choose from and shows the chosen
// one's failure handling: what every caller shares, what each caller gets
// per port, each part with the policy that set it, and the backends
// ejected right now by which callers.
const detailURL = "/debug/dashboard/service";
function drawResilience(s) {
  const sel = $("resilience-service"), names = s.services.filter((v) => v.inSpec).map((v) => v.name);
  const chosen = sel.value || names[0] || "";
  const options = names.map((n) => `<option value="${esc(n)}"${n === chosen ? " selected" : ""}>${esc(n)}</option>`).join("");
  if (options !== sel.dataset.options) { sel.innerHTML = options; sel.dataset.options = options; } // an open list stays open
  loadDetail();
}
$("resilience-service").addEventListener("change", loadDetail);

async function loadDetail() {
  const name = $("resilience-service").value;
  if (!name) { $("resilience").textContent = "No Service in the specification."; return; }
  try {
    const r = await fetch(detailURL + "?service=" + encodeURIComponent(name), { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    const d = await r.json();
    if ($("resilience-service").value === name) $("resilience").innerHTML = detailHTML(d);
  } catch (err) {
    $("resilience").textContent = "not available: " + err.message;
  }
}

const partCell = (p) => esc(p.setting) + (p.source ? `<br><span class="source">${esc(p.source)}</span>` : "");

function detailHTML(d) {
  const v = d.resilience;
  let h = `<h3>Every caller's proxy</h3><table data-testid="resilience-cluster"><tr><th>Part</th><th>Setting</th><th>Set by</th></tr>` +
    v.cluster.map((p) => `<tr data-part="${esc(p.part)}"><td>${esc(p.part)}</td><td>${esc(p.setting)}</td><td class="source">${esc(p.source || "—")}</td></tr>`).join("") + "</table>";
  h += "<h3>Ejected now</h3>";
  h += d.ejected.length ? `<ul data-testid="resilience-ejected">` + d.ejected.map((e) => `<li><span class="ejected">${esc(e.backend)}</span> by ${esc(e.by.join(", "))}</li>`).join("") + "</ul>" :
    "<p>No backend is ejected by a caller's Envoy.</p>";
  if (d.proxylessCallers.length) {
    h += `<p data-testid="resilience-proxyless">Proxyless gRPC callers do not report ejections, so theirs are not shown: ${esc(d.proxylessCallers.join(", "))}.</p>`;
  }
  h += "<h3>Per caller and port</h3>";
  if (!v.calls.length) return h + "<p>No Service may call it.</p>";
  const names = (v.calls.find((c) => c.parts.length) || { parts: [] }).parts.map((p) => p.part);
  h += `<table data-testid="resilience-calls"><tr><th>Caller</th><th>Port</th>` + names.map((n) => `<th>${esc(n)}</th>`).join("") + "<th>Routes</th></tr>" +
    v.calls.map((c) => `<tr data-call="${esc(c.caller + " " + c.port)}"><td>${esc(c.caller)}</td><td>${c.port}/${esc(c.appProtocol)}</td>` +
      (c.parts.length ? c.parts.map((p) => `<td data-part="${esc(p.part)}">${partCell(p)}</td>`).join("") : `<td colspan="${names.length}">tcp: the shared parts above apply</td>`) +
      `<td>${esc((c.routes || []).join(", "))}</td></tr>`).join("") + "</table>";
  if (v.callsTruncated) h += "<p>More callers are left out.</p>";
  return h;
}

function drawProxies(s) {
  $("proxies").innerHTML = "<tr><th>Proxy</th><th>Service</th><th>Flavour</th><th>Address</th><th>Connected</th><th>Last ACK</th><th>Last NACK</th></tr>" +
    s.proxies.map((p) => `<tr><td>${esc(p.cn)}</td><td>${esc(p.service)}</td><td>${esc(p.flavor)}</td><td>${esc(p.address)}</td><td>${ago(p.connected)}</td><td>${ago(p.lastAck)}</td><td class="nack">${p.nack ? esc(p.nackType + ": " + p.nack) + " (" + ago(p.nackAt) + ")" : ""}</td></tr>`).join("");
}

function drawCertificates(s) {
  $("certificates").innerHTML = "<tr><th>Certificate</th><th>Expires in</th><th>Rotation due</th></tr>" +
    [Object.assign({ name: "mesh CA" }, s.ca)].concat(s.certificates).map((c) => `<tr><td>${esc(c.name)}</td><td>${left(c.expires)}</td><td>${c.rotateAt ? left(c.rotateAt) : ""}</td></tr>`).join("");
}

function drawProviders(s) {
  $("providers").innerHTML = "<tr><th>Provider</th><th>State</th><th>Last list</th></tr>" +
    s.providers.map((p) => `<tr><td>${esc(p.name)}</td><td class="${p.stale ? "health-stale" : ""}">${esc(p.state)}${p.stale ? " (stale)" : ""}</td><td>${ago(p.lastSync)}</td></tr>`).join("");
}

// renderGraph draws services on a circle and an arrow per permission; a
// thousand nodes and their edges are one SVG string, drawn once per change.
function renderGraph(s) {
  $("policy-mode").textContent = s.permissive ? "Permissive mode: every service may call every other (no edges drawn)." :
    s.edgesTruncated ? `Showing the first ${s.edges.length} permissions.` : `${s.edges.length} permissions from TrafficTargets.`;
  const names = s.services.map((v) => v.name);
  const n = names.length, w = 900, h = Math.max(460, Math.min(900, 40 * n)), r = Math.min(w, h) / 2 - 50;
  const pos = {};
  names.forEach((name, i) => { const a = 2 * Math.PI * i / Math.max(n, 1) - Math.PI / 2; pos[name] = [w / 2 + r * Math.cos(a), h / 2 + r * Math.sin(a)]; });
  const svg = $("graph");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.style.height = h + "px";
  // Past 60 services the nodes are dots without labels and the edges
  // carry no tooltip of their own (thousands of title elements cost more
  // to lay out than the lines): the node's tooltip names it.
  const small = n > 60;
  const edges = s.edges.filter((e) => pos[e.from] && pos[e.to]).map((e) => {
    const [x1, y1] = pos[e.from], [x2, y2] = pos[e.to], d = Math.hypot(x2 - x1, y2 - y1) || 1, k = 9 / d;
    return `<line class="edge" data-edge="${esc(e.from + " -> " + e.to)}" x1="${x1.toFixed(1)}" y1="${y1.toFixed(1)}" x2="${(x2 - (x2 - x1) * k).toFixed(1)}" y2="${(y2 - (y2 - y1) * k).toFixed(1)}">` +
      (small ? "" : `<title>${esc(e.from + " may call " + e.to)}</title>`) + "</line>";
  }).join("");
  const nodes = s.services.map((v) => {
    const [x, y] = pos[v.name];
    return `<g class="node${v.inSpec ? "" : " nospec"}" data-node="${esc(v.name)}"><circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${small ? 3 : 7}"><title>${esc(v.name)}</title></circle>` +
      (small ? "" : `<text x="${(x + 10).toFixed(1)}" y="${(y + 4).toFixed(1)}">${esc(v.name)}</text>`) + "</g>";
  }).join("");
  svg.innerHTML = `<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#64748b"/></marker></defs>` + edges + nodes;
}

poll();
