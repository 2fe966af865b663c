// swarmgpu GPU map: polls /api/v1/cluster and redraws the map in place.
// Plain DOM building only: every value from the API goes in as text, never as HTML.
"use strict";

(() => {
  const API = "/api/v1/cluster";
  const HISTORY_API = "/api/v1/history";
  const HISTORY_WINDOW = "30m";
  const POLL_MS = 2500;
  const FLEET_AUTO_NODES = 24; // above this many nodes "auto" draws the fleet heat map
  const LIST_CAP = 40; // side lists show this many, then "n more: narrow with Search"
  // What counts as hot (the tiles' ▲): style.css's --hot-util-pct and --hot-temp-c, the
  // lines the daemon's header counts read too. Read at first use: the style sheet has
  // loaded by the time a document is drawn.
  let hotLines = null;
  const hotLine = (k) => (hotLines ??= (() => {
    const s = getComputedStyle(document.documentElement);
    return { util: Number(s.getPropertyValue("--hot-util-pct")), temp: Number(s.getPropertyValue("--hot-temp-c")) };
  })())[k];
  const STATES = ["pending", "failed", "hot", "unhealthy", "drifted", "over-share", "free"];
  const TIMEOUT_MS = 4000; // for the daemon to start its answer
  // for the body once it has: a fleet's document on a slow link takes longer (the daemon
  // ends an answer not read within 10 s itself, httpguard.WRITE_DEADLINE_S)
  const BODY_TIMEOUT_MS = 12000;
  const STALE_AFTER_MS = 3 * POLL_MS + 1000;
  const KIND_ORDER = ["nvlink", "numa", "pcie"];
  const KIND_LABEL = { nvlink: "NVLink", numa: "NUMA", pcie: "PCIe" };
  const BADGE_KINDS = ["ok", "warn", "bad", "muted"];
  // A class from the document's words only through a fixed list: "ok sr" added a class
  // the page's CSS hides (or restyles) an element with. Unknown -> the neutral one.
  const kindClass = (kind, known, neutral) => (known.includes(kind) ? kind : neutral);

  const state = {
    doc: null, // last good document
    lastText: null, // its raw text: an unchanged poll redraws nothing
    lastOkAt: null, // Date.now() of the last good poll
    error: null, // why the last poll failed, or null
    drawError: null, // which parts of the last render threw, or null
    selected: null, // data-key of the GPU shown in the inspector
    paused: false,
    openDetails: new Set(), // data-keys of <details> the user opened
    // view state, mirrored in the URL (?q=&state=&view=&color=&node=&service=&gpu=)
    q: "",
    stateFilter: "",
    view: "auto",
    color: "alloc",
    focusNode: null, // hostname whose card is open above the map
    focusService: null, // service name whose view is open above the map
    hist: new Map(), // uuid -> {t, util_pct, memory_used_mib, temp_c, power_w}
    histError: null,
    histFor: null, // the query the history was fetched for
    fleet: null, // {sig, cells: [el], keys: [key]} of the drawn heat map
    fleetFocus: null, // data-key of the heat-map cell that holds the tab stop
    gpuCount: 0, // GPUs in the current document
    lightSeen: false, // the first poll's light document came (or failed): whole ones now
    perf: { first: null, full: null, last: null, renders: 0, updates: [] }, // read by benchmarks/bench_map.py
  };

  // ---- tiny DOM helpers ----------------------------------------------------

  // Others' text as the page shows it: each control or format character (a bidi override
  // reverses the rest of the line, a zero-width space makes two names look alike) written
  // as its escape, as the commands print it (core/peertext.escaped). data-* keep the value.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\p{Cn}]/gu;
  const C_ESC = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };
  const escapeOne = (c) => {
    const n = c.codePointAt(0);
    const hex = (w) => n.toString(16).padStart(w, "0");
    return C_ESC[c] || (n <= 0xff ? `\\x${hex(2)}` : n <= 0xffff ? `\\u${hex(4)}` : `\\U${hex(8)}`);
  };
  const escapedText = (s) => s.replace(HIDDEN, escapeOne);
  const TEXT_ATTRS = ["title", "aria-label", "alt", "placeholder"];

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : TEXT_ATTRS.includes(k) ? escapedText(text(v)) : text(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : escapedText(text(c))); // strings become text nodes
    }
    return el;
  }

  const $ = (id) => document.getElementById(id);

  function replace(el, ...children) {
    el.replaceChildren();
    for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) el.append(c);
  }

  const identity = (n) => (n.nodeType === 1 ? `${n.nodeName}|${n.dataset.key || n.dataset.node || ""}` : `#${n.nodeType}`);

  function morph(old, neu) {
    // Patch `old` to look like `neu`, touching only what changed: focus, scroll, open
    // <details> and screen-reader position survive a poll. Elements pair up by tag and key.
    // a <details> the user opened stays open even if a redraw raced its toggle event
    for (const a of [...old.attributes]) if (!neu.hasAttribute(a.name) && !(a.name === "open" && old.nodeName === "DETAILS")) old.removeAttribute(a.name);
    // a style through the CSSOM: the daemon's CSP (style-src 'self') ignores a style
    // attribute set from script, and the bars and hues stayed at the first poll's
    for (const a of [...neu.attributes]) {
      if (old.getAttribute(a.name) === a.value) continue;
      if (a.name === "style") old.style.cssText = neu.style.cssText;
      else old.setAttribute(a.name, a.value);
    }
    const oc = [...old.childNodes];
    const nc = [...neu.childNodes];
    nc.forEach((n, i) => {
      const o = oc[i];
      if (!o) old.append(n);
      else if (identity(o) !== identity(n)) old.replaceChild(n, o);
      else if (o.nodeType === 1) morph(o, n);
      else if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
    });
    for (const o of oc.slice(nc.length)) o.remove();
  }

  // ---- formatting ----------------------------------------------------------
  // The document passes on what others wrote (a move record is anyone's with the manager
  // API): a value of the wrong type or range reads "?" or is left out. One that threw
  // (toISOString past year 275760, String() of {"toString": 1}) stopped the redraw.

  // a finite number, or null; what every figure is read through
  const num = (x) => (typeof x === "number" && isFinite(x) ? x : null);
  // text of a string, number or boolean; "?" for anything else
  const text = (x) => (typeof x === "string" ? x : typeof x === "number" || typeof x === "boolean" ? String(x) : "?");
  // an array, or none
  const arr = (x) => (Array.isArray(x) ? x : []);

  function gib(mib) {
    if (num(mib) === null) return "?";
    const g = mib / 1024;
    return g >= 10 ? `${Math.round(g)}` : g.toFixed(1).replace(/\.0$/, "");
  }

  function used(mib) {
    // a near-idle GPU reads "3 MiB", not a misleading "0 GiB"
    if (num(mib) === null) return "?";
    return mib < 1024 ? `${mib} MiB` : gib(mib);
  }

  const pct = (x) => (num(x) === null ? "n/a" : `${Math.round(x)} %`);
  const round = (x) => (num(x) === null ? "?" : String(Math.round(x)));

  function ago(seconds) {
    if (num(seconds) === null) return "";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  function when(ts) {
    // epoch seconds as a Date, or null (none, not a number, out of Date's range)
    const d = num(ts) ? new Date(ts * 1000) : null;
    return d && isFinite(d.getTime()) ? d : null;
  }

  function clock(ts) {
    const d = when(ts);
    return d ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false }) : "?";
  }

  const iso = (ts) => when(ts)?.toISOString() ?? null; // null: no datetime attribute

  function list(xs) {
    // 0,1,2,3 -> "0–3"; 0,2 -> "0, 2"; GPU indexes or node names, nothing else
    const s = arr(xs).filter((x) => typeof x === "string" || num(x) !== null).sort((a, b) => a - b);
    const parts = [];
    for (let i = 0; i < s.length; ) {
      let j = i;
      while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
      parts.push(j - i >= 2 ? `${s[i]}–${s[j]}` : s.slice(i, j + 1).join(", "));
      i = j + 1;
    }
    return parts.join(", ");
  }

  function hue(name) {
    // stable per-service hue; text stays dark on the light tint for contrast
    let x = 0;
    for (const ch of text(name)) x = (x * 31 + ch.codePointAt(0)) >>> 0;
    return x % 360;
  }

  function svcChip(name, extra) {
    const el = h("span", { class: "svc" }, name, extra ? h("span", { class: "share" }, extra) : null);
    el.style.setProperty("--hue", hue(name));
    return el;
  }

  // replicas packed on one node: which task slot holds the GPU
  const slotText = (x) => (x.slot ? `slot ${x.slot}` : "");

  const shortId = (id) => (id ? text(id).slice(0, 10) : "?");

  function share(milli) {
    if (num(milli) === null || milli >= 1000) return null;
    return `${Math.round(milli / 10)} %`;
  }

  // ---- status words (text + icon, never colour alone) ---------------------

  const LABELS_STATE = {
    "in-sync": ["ok", "✓", "Labels in sync"],
    drifted: ["warn", "!", "Labels drifted"],
    "agent-stale": ["bad", "✕", "Agent stale"],
    "agent-unreadable": ["bad", "✕", "Agent unreadable"],
    // the agent answers but cannot list the GPUs (NVML): labels kept, not drift
    "gpus-unread": ["bad", "✕", "GPUs cannot be read"],
    "no-agent": ["muted", "–", "No agent"],
  };

  function badge(kind, icon, text, title) {
    return h("span", { class: `badge ${kindClass(kind, BADGE_KINDS, "muted")}`, title }, h("span", { class: "icon", "aria-hidden": "true" }, icon), text);
  }

  function nodeBadge(node) {
    const ok = node.state === "ready" && node.availability === "active";
    return badge(ok ? "ok" : "warn", ok ? "●" : "!", `${node.state || "?"} · ${node.availability || "?"}`);
  }

  function labelsBadge(node, now) {
    let [kind, icon, text] = LABELS_STATE[node.labels_state] || ["muted", "?", `Labels ${node.labels_state}`];
    const drift = node.drift || [];
    const agent = node.agent || {};
    // in sync with facts read long ago: nothing new is placed there, as on a silent agent's
    if (agent.status === "stale") [kind, icon] = LABELS_STATE["agent-stale"];
    let extra = "";
    if (node.labels_state === "drifted" && drift.length) extra = ` (${drift.length})`;
    if (node.labels_state === "agent-stale" && agent.last_ok) extra = ` · last ok ${ago(now - agent.last_ok)}`;
    if (node.labels_state === "agent-unreadable" && agent.cause) extra = ` · ${agent.cause}`;
    // an agent answering with an old read (its GPU source hangs): the facts' age
    if (agent.status === "stale" && agent.last_ok) extra += ` · agent facts stale, read ${ago(now - agent.last_ok)}`;
    return badge(kind, icon, text + extra, agent.fix ? `fix: ${agent.fix}` : undefined);
  }

  // ---- per-holder badges ---------------------------------------------------
  // One place for badges on a holder (tiles, GPU details, service view). Each entry
  // maps (holder, gpu, node) to [kind, icon, text, title] or null. The document may
  // also carry holder.badges = [{kind, icon, text, title}] for badges the daemon
  // computes (e.g. an over-share check); add client-side ones to this list.
  const HOLDER_BADGES = [
    // over share: the holder uses more GPU memory than its share (swarmgpu/manager/services/overshare.py)
    (x) => (x.over_share ? ["bad", "!", "over share", `uses ${x.memory_used_mib} MiB, share ${x.memory_share_mib} MiB`] : null),
  ];

  function holderBadges(x, gpu, node) {
    const out = [];
    for (const f of HOLDER_BADGES) {
      const b = f(x, gpu, node);
      if (b) out.push(badge(b[0], b[1], b[2], b[3]));
    }
    for (const b of x.badges || []) if (b && b.text) out.push(badge(b.kind || "muted", b.icon || "•", b.text, b.title));
    return out;
  }

  // ---- GPU states (filter words; also drawn as icons, never colour alone) ------

  const known = (x) => num(x) !== null; // a figure the page can draw: else "not reported"
  const ALL = { has: () => true }; // "every GPU of the node matches" (no filter)

  function shareSum(gpu) {
    return (gpu.holders || []).reduce((a, x) => a + (known(x.share_milli) ? x.share_milli : 1000), 0);
  }

  const isHot = (g) => (known(g.util_pct) && g.util_pct >= hotLine("util")) || (known(g.temp_c) && g.temp_c >= hotLine("temp"));
  // An application's XID (xid_effect "none": 13, 31, 43...) leaves the GPU fine (docs/health.md).
  const isSick = (g) => g.healthy === false || (known(g.xid) && g.xid > 0 && g.xid_effect !== "none") || (known(g.ecc_dbe) && g.ecc_dbe > 0);
  const isOverShare = (g) => shareSum(g) > 1000 || (g.holders || []).some((x) => x.over_share || (x.badges || []).some((b) => b && b.text === "over-share"));
  const isDrifted = (n) => ["drifted", "agent-stale", "agent-unreadable", "gpus-unread"].includes(n.labels_state);

  // the names of the services whose planning failed, in the document drawn now: built
  // once per document (the "failed" filter asks for every holder of every GPU)
  let failedMemo = { doc: null, names: new Set() };

  function failedServices() {
    if (failedMemo.doc !== state.doc) {
      const names = new Set((state.doc?.services || []).filter((s) => s.status === "failed").map((s) => s.name));
      failedMemo = { doc: state.doc, names };
    }
    return failedMemo.names;
  }

  function gpuServices(gpu) {
    const names = (gpu.holders || []).map((x) => x.service);
    for (const m of gpu.mig || []) if (m.holder) names.push(m.holder.service);
    return names;
  }

  // ---- search and filter -------------------------------------------------------
  // "node:gpu-1 service:llm product:h100 zone:a state:hot words" - every term must
  // hold; plain words match a node's name, product or zone, or a holder's service.

  const FILTER_KEYS = ["node", "service", "product", "zone", "state"];

  function parseFilter(q, stateWord) {
    const terms = [];
    for (const raw of String(q || "").trim().split(/\s+/)) {
      if (!raw) continue;
      const m = /^([a-z]+):(.*)$/i.exec(raw);
      if (m && FILTER_KEYS.includes(m[1].toLowerCase())) terms.push({ key: m[1].toLowerCase(), value: m[2].toLowerCase() });
      else terms.push({ key: "text", value: raw.toLowerCase() });
    }
    if (stateWord) terms.push({ key: "state", value: stateWord });
    return { terms, active: terms.length > 0, bad: terms.filter((t) => t.key === "state" && !STATES.includes(t.value)).map((t) => t.value) };
  }

  const has = (hay, needle) => String(hay ?? "").toLowerCase().includes(needle);

  function nodeTermOk(node, t) {
    // null: the term is about GPUs, not the node
    if (t.key === "node") return has(node.hostname, t.value);
    if (t.key === "product") return has(node.product, t.value) || (node.gpus || []).some((g) => has(g.product, t.value));
    if (t.key === "zone") return has(node.zone, t.value);
    if (t.key === "state" && t.value === "drifted") return isDrifted(node);
    return null;
  }

  function gpuTermOk(node, gpu, t) {
    if (t.key === "service") return gpuServices(gpu).some((s) => has(s, t.value));
    if (t.key === "state") {
      if (t.value === "hot") return isHot(gpu);
      if (t.value === "unhealthy") return isSick(gpu);
      if (t.value === "over-share") return isOverShare(gpu);
      if (t.value === "free") return !gpuHeld(gpu);
      // a service whose planning failed keeps what it holds (placement.isolate)
      if (t.value === "failed") return gpuServices(gpu).some((s) => failedServices().has(s));
      return false; // pending requests hold no GPU: see the Pending panel
    }
    if (t.key === "text") return has(node.hostname, t.value) || has(gpu.product || node.product, t.value) || has(node.zone, t.value) || gpuServices(gpu).some((s) => has(s, t.value));
    return true;
  }

  function filterNode(node, f) {
    // -> null (node hidden) or a Set of the GPU indexes that match
    const gpus = node.gpus || [];
    const gpuTerms = [];
    for (const t of f.terms) {
      const ok = nodeTermOk(node, t);
      if (ok === false) return null;
      if (ok === null) gpuTerms.push(t);
    }
    if (!gpuTerms.length) return new Set(gpus.map((g) => g.index));
    const hit = new Set(gpus.filter((g) => gpuTerms.every((t) => gpuTermOk(node, g, t))).map((g) => g.index));
    return hit.size ? hit : null;
  }

  function serviceOk(svc, f) {
    // side lists: service and state terms narrow them; node terms match placements
    return f.terms.every((t) => {
      if (t.key === "service") return has(svc.name, t.value);
      if (t.key === "node") return (svc.placements || []).some((p) => has(p.node, t.value));
      if (t.key === "state" && t.value === "pending") return svc.status === "pending" || svc.status === "invalid";
      if (t.key === "state" && t.value === "failed") return svc.status === "failed";
      if (t.key === "text") return has(svc.name, t.value) || (svc.placements || []).some((p) => has(p.node, t.value));
      return true;
    });
  }

  // ---- the URL holds the view, so it can be shared -----------------------------

  function readUrl() {
    const u = new URLSearchParams(location.search);
    state.q = u.get("q") || "";
    state.stateFilter = STATES.includes(u.get("state")) ? u.get("state") : "";
    state.view = ["auto", "cards", "fleet"].includes(u.get("view")) ? u.get("view") : "auto";
    state.color = ["alloc", "util", "mem", "temp"].includes(u.get("color")) ? u.get("color") : "alloc";
    state.focusNode = u.get("node") || null;
    state.focusService = u.get("service") || null;
    state.selected = state.focusNode && u.get("gpu") !== null ? `${state.focusNode}/${u.get("gpu")}` : state.selected;
    $("q").value = state.q;
    $("state").value = state.stateFilter;
    $("view").value = state.view;
    $("color").value = state.color;
  }

  function writeUrl() {
    const u = new URLSearchParams();
    if (state.q) u.set("q", state.q);
    if (state.stateFilter) u.set("state", state.stateFilter);
    if (state.view !== "auto") u.set("view", state.view);
    if (state.color !== "alloc") u.set("color", state.color);
    if (state.focusNode) u.set("node", state.focusNode);
    if (state.focusService) u.set("service", state.focusService);
    if (state.focusNode && state.selected && state.selected.startsWith(state.focusNode + "/")) u.set("gpu", state.selected.slice(state.focusNode.length + 1));
    const qs = u.toString();
    const url = location.pathname + (qs ? `?${qs}` : "");
    if (url !== location.pathname + location.search) history.replaceState(null, "", url);
  }

  // ---- health and history ------------------------------------------------------

  function healthBits(gpu) {
    // temperature, power and error counters as words; unknown ones are left out
    const out = [];
    if (known(gpu.temp_c)) out.push(h("span", { class: `temp${gpu.temp_c >= hotLine("temp") ? " high" : ""}` }, `${round(gpu.temp_c)} °C`));
    if (known(gpu.power_w)) out.push(h("span", { class: "power" }, `${round(gpu.power_w)} W`));
    if (known(gpu.xid) && gpu.xid > 0) out.push(gpu.xid_effect === "none" ? badge("warn", "!", `XID ${gpu.xid}`, "last XID: an application error; the GPU is fine") : badge("bad", "✕", `XID ${gpu.xid}`, "last XID error the driver reported"));
    if (known(gpu.ecc_dbe) && gpu.ecc_dbe > 0) out.push(badge("bad", "✕", `ECC ${gpu.ecc_dbe} DBE`, "uncorrectable (double-bit) ECC errors since the driver loaded"));
    else if (known(gpu.ecc_sbe) && gpu.ecc_sbe > 0) out.push(badge("warn", "!", `ECC ${gpu.ecc_sbe} SBE`, "corrected (single-bit) ECC errors since the driver loaded"));
    return out;
  }

  function healthText(gpu) {
    const parts = [];
    if (known(gpu.temp_c)) parts.push(`${round(gpu.temp_c)} °C${gpu.temp_c >= hotLine("temp") ? " ▲" : ""}`);
    if (known(gpu.power_w)) parts.push(`${round(gpu.power_w)} W`);
    if (known(gpu.xid)) parts.push(gpu.xid > 0 ? `XID ${gpu.xid}` : "no XID errors");
    if (known(gpu.ecc_dbe) || known(gpu.ecc_sbe)) parts.push(`ECC ${round(gpu.ecc_sbe)} corrected, ${round(gpu.ecc_dbe)} uncorrectable`);
    return parts.join(" · ");
  }

  function migMemory(gpu) {
    // a MIG GPU has no whole-GPU memory figure: show what its slices hold (and use)
    const slices = gpu.mig || [];
    const held = slices.filter((m) => m.holder).reduce((a, m) => a + (m.memory_mib || 0), 0);
    const usedParts = slices.map((m) => m.memory_used_mib).filter(known);
    return { held, total: gpu.memory_mib, used: usedParts.length ? usedParts.reduce((a, b) => a + b, 0) : null };
  }

  const SVG = "http://www.w3.org/2000/svg";

  function svgEl(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    return el;
  }

  function polyline(ts, vs, t0, t1, max, w, hgt, cls) {
    const pts = [];
    ts.forEach((t, i) => {
      const v = vs[i];
      if (!known(v)) return;
      const x = t1 > t0 ? ((t - t0) / (t1 - t0)) * w : w;
      const y = hgt - Math.max(0, Math.min(1, v / max)) * hgt;
      pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
    });
    return pts.length ? svgEl("polyline", { points: pts.join(" "), class: cls, fill: "none", "vector-effect": "non-scaling-stroke" }) : null;
  }

  function series(gpu) {
    const s = state.hist.get(gpu.uuid);
    return s && s.t && s.t.length > 1 ? s : null; // a line needs two samples
  }

  function spark(gpu) {
    // utilisation (solid) and memory (dashed) over the history window; words in the label
    const s = series(gpu);
    if (!s) return null;
    const t1 = s.t[s.t.length - 1];
    const t0 = Math.min(s.t[0], t1 - 60);
    const svg = svgEl("svg", { class: "spark", viewBox: "0 0 100 20", preserveAspectRatio: "none", "aria-hidden": "true" });
    const mem = s.memory_used_mib.map((v) => (known(v) && gpu.memory_mib ? (v / gpu.memory_mib) * 100 : null));
    for (const l of [polyline(s.t, mem, t0, t1, 100, 100, 20, "l-mem"), polyline(s.t, s.util_pct, t0, t1, 100, 100, 20, "l-util")]) if (l) svg.append(l);
    return h("div", { class: "spark-wrap", title: `last ${HISTORY_WINDOW}: utilisation (solid) and memory (dashed)` }, svg);
  }

  function range(vs) {
    const k = vs.filter(known);
    return k.length ? [Math.min(...k), Math.max(...k)] : null;
  }

  function chart(gpu) {
    // the details panel's chart: 0-100 scale for utilisation %, memory % and °C
    const s = series(gpu);
    if (!s) return h("p", { class: "muted" }, state.histError ? `No history: ${state.histError}` : "No history yet: the daemon records one sample per cycle.");
    const W = 300;
    const H = 110;
    const t1 = s.t[s.t.length - 1];
    const t0 = Math.min(s.t[0], t1 - 60);
    const mem = s.memory_used_mib.map((v) => (known(v) && gpu.memory_mib ? (v / gpu.memory_mib) * 100 : null));
    const svg = svgEl("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": chartWords(gpu, s) });
    for (const y of [0, 50, 100]) svg.append(svgEl("line", { x1: 0, x2: W, y1: H - (y / 100) * H, y2: H - (y / 100) * H, class: "grid" }));
    for (const l of [polyline(s.t, s.temp_c, t0, t1, 100, W, H, "l-temp"), polyline(s.t, mem, t0, t1, 100, W, H, "l-mem"), polyline(s.t, s.util_pct, t0, t1, 100, W, H, "l-util")]) if (l) svg.append(l);
    const mins = Math.max(1, Math.round((t1 - t0) / 60));
    return h(
      "figure",
      { class: "chart-fig" },
      svg,
      h("figcaption", {}, h("span", { class: "key util" }, "— utilisation %"), h("span", { class: "key mem" }, "- - memory %"), h("span", { class: "key temp" }, "··· °C"), h("span", { class: "axis" }, `0–100, last ${mins} min`)),
    );
  }

  function chartWords(gpu, s) {
    const parts = [];
    const u = range(s.util_pct);
    const m = range(s.memory_used_mib);
    const t = range(s.temp_c);
    const p = range(s.power_w);
    if (u) parts.push(`utilisation ${Math.round(u[0])}–${Math.round(u[1])} %`);
    if (m) parts.push(`memory ${gib(m[0])}–${gib(m[1])} GiB`);
    if (t) parts.push(`temperature ${Math.round(t[0])}–${Math.round(t[1])} °C`);
    if (p) parts.push(`power ${Math.round(p[0])}–${Math.round(p[1])} W`);
    return `History of ${gpu.uuid}: ${parts.join(", ") || "no values"}`;
  }

  // ---- nodes ---------------------------------------------------------------

  function gpuKey(node, gpu) {
    return `${node.hostname}/${gpu.index}`;
  }

  function gpuHeld(gpu) {
    return (gpu.holders || []).length > 0 || (gpu.mig || []).some((m) => m.holder);
  }

  function layoutGroups(node) {
    // Draw GPUs grouped by the first kind that splits them (NVLink, then NUMA, then PCIe);
    // the other kinds are listed as chips so no grouping is lost.
    const gpus = node.gpus || [];
    const groups = (node.groups || []).filter((g) => (g.gpus || []).length);
    const of = (k) => groups.filter((g) => g.kind === k);
    let kind = KIND_ORDER.find((k) => of(k).length > 1) || KIND_ORDER.find((k) => of(k).length) || null;
    if (!kind) return { kind: null, boxes: [{ group: null, gpus }], others: [] };
    const byIndex = new Map(gpus.map((g) => [g.index, g]));
    const seen = new Set();
    const boxes = [];
    for (const g of of(kind)) {
      const members = g.gpus.filter((i) => byIndex.has(i) && !seen.has(i)).map((i) => byIndex.get(i));
      members.forEach((m) => seen.add(m.index));
      if (members.length) boxes.push({ group: g, gpus: members });
    }
    const rest = gpus.filter((g) => !seen.has(g.index));
    if (rest.length) boxes.push({ group: null, gpus: rest, label: `No ${KIND_LABEL[kind] || kind} group` });
    return { kind, boxes, others: groups.filter((g) => g.kind !== kind) };
  }

  function meter(label, value, max, text, cls) {
    const frac = num(value) === null || !num(max) ? null : Math.min(1, Math.max(0, value / max));
    const bar = h("span", { class: "fill" });
    bar.style.width = frac === null ? "0" : `${(frac * 100).toFixed(1)}%`;
    return h(
      "div",
      { class: `meter ${cls}${frac === null ? " unknown" : ""}${frac !== null && frac > 0.9 ? " high" : ""}` },
      h("span", { class: "m-label" }, label),
      h("span", { class: "m-track", "aria-hidden": "true" }, bar),
      h("span", { class: "m-value" }, text),
    );
  }

  function migStack(gpu) {
    const slices = gpu.mig || [];
    const el = h(
      "div",
      { class: "mig", "aria-hidden": "true" },
      slices.map((m) => {
        const s = h(
          "div",
          { class: `slice${m.holder ? " held" : ""}` },
          h("span", { class: "prof" }, m.profile),
          m.holder ? svcChip(m.holder.service) : h("span", { class: "free" }, "free"),
          h("span", { class: "smem" }, known(m.memory_used_mib) ? `${used(m.memory_used_mib)} / ${gib(m.memory_mib)} GiB` : `${gib(m.memory_mib)} GiB`),
        );
        s.style.flexGrow = String(Math.max(1, m.memory_mib || 1));
        if (m.holder) s.style.setProperty("--hue", hue(m.holder.service));
        return s;
      }),
    );
    return el;
  }

  function gpuLabel(node, gpu) {
    const parts = [`${node.hostname} GPU ${gpu.index}`, gpu.product || node.product];
    if (gpu.healthy === false) parts.push(`unhealthy${gpu.error ? ": " + gpu.error : ""}`);
    if (known(gpu.memory_used_mib)) parts.push(`${gib(gpu.memory_used_mib)} of ${gib(gpu.memory_mib)} GiB used`);
    else if ((gpu.mig || []).length) parts.push(`MIG slices hold ${gib(migMemory(gpu).held)} of ${gib(gpu.memory_mib)} GiB`);
    else parts.push(`${gib(gpu.memory_mib)} GiB, usage unknown`);
    parts.push(`utilisation ${pct(gpu.util_pct)}`);
    if (isHot(gpu)) parts.push("hot");
    const health = healthText(gpu);
    if (health) parts.push(health);
    if ((gpu.mig || []).length) {
      parts.push(`MIG: ${gpu.mig.map((m) => `${m.profile} ${m.holder ? "held by " + m.holder.service : "free"}`).join(", ")}`);
    }
    const hs = gpu.holders || [];
    if (hs.length) parts.push(`held by ${hs.map((x) => x.service + (share(x.share_milli) ? ` (${share(x.share_milli)})` : "") + (x.slot ? ` (${slotText(x)})` : "")).join(", ")}`);
    else if (!(gpu.mig || []).length) parts.push("free");
    return parts.join("; ");
  }

  function memMeter(gpu) {
    if (!known(gpu.memory_used_mib) && (gpu.mig || []).length) {
      const mm = migMemory(gpu); // slices held, of the whole GPU
      return meter("MIG", mm.held, gpu.memory_mib, `${gib(mm.held)} / ${gib(gpu.memory_mib)} GiB held`, "mem");
    }
    return meter(
      "Mem",
      gpu.memory_used_mib,
      gpu.memory_mib,
      known(gpu.memory_used_mib) ? `${used(gpu.memory_used_mib)} / ${gib(gpu.memory_mib)} GiB` : `? / ${gib(gpu.memory_mib)} GiB`,
      "mem",
    );
  }

  function gpuTile(node, gpu, match) {
    const key = gpuKey(node, gpu);
    const mig = (gpu.mig || []).length > 0;
    const holders = gpu.holders || [];
    const sick = isSick(gpu);
    const cls = ["gpu", gpuHeld(gpu) ? "held" : "free", sick ? "sick" : "", mig ? "has-mig" : "", match && !match.has(gpu.index) ? "dim" : ""];
    if (key === state.selected) cls.push("selected");
    const bits = healthBits(gpu);
    const tile = h(
      "div",
      {
        class: cls.filter(Boolean).join(" "),
        tabindex: "0",
        role: "button",
        "aria-pressed": key === state.selected ? "true" : "false",
        "aria-label": gpuLabel(node, gpu),
        "data-key": key,
      },
      h(
        "div",
        { class: "gpu-head" },
        h("span", { class: "gpu-idx" }, `GPU ${gpu.index}`),
        gpu.healthy === false ? badge("bad", "✕", "unhealthy") : null,
        mig ? h("span", { class: "tag" }, "MIG") : null,
      ),
      memMeter(gpu),
      meter("Util", gpu.util_pct, 100, pct(gpu.util_pct), "util"),
      bits.length ? h("div", { class: "health" }, bits) : null,
      spark(gpu),
      mig ? migStack(gpu) : null,
      h(
        "div",
        { class: "holders" },
        holders.length
          ? holders.map((x) =>
              h(
                "div",
                { class: "holder" },
                svcChip(x.service, share(x.share_milli) || slotText(x)),
                holderBadges(x, gpu, node),
                x.request ? h("span", { class: "req" }, x.request) : null,
              ),
            )
          : mig
            ? null
            : h("span", { class: "free" }, "free"),
      ),
    );
    if (holders.length) tile.style.setProperty("--hue", hue(holders[0].service));
    return tile;
  }

  function linkMatrix(node) {
    const links = node.links || [];
    if (!links.length) return null;
    const key = `links/${node.hostname}`;
    const idx = (node.gpus || []).map((g) => g.index);
    const name = (i) => `GPU${idx[i] ?? i}`;
    const cellClass = (v) => {
      const t = String(v).trim();
      if (t === "X") return "self";
      if (/^NV\d+/.test(t)) return "nv";
      if (t === "PIX" || t === "PXB") return "near";
      return "far";
    };
    const d = h(
      "details",
      { class: "links", "data-key": key },
      h("summary", {}, "Link matrix"),
      h(
        "table",
        {},
        h("caption", {}, `GPU interconnect on ${node.hostname}: NV# = NVLink (# links); PIX, PXB = PCIe switch; PHB, NODE, SYS = through the CPU`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, h("span", { class: "sr" }, "from / to")), links.map((_, i) => h("th", { scope: "col" }, name(i))))),
        h(
          "tbody",
          {},
          links.map((row, i) => h("tr", {}, h("th", { scope: "row" }, name(i)), row.map((v) => h("td", { class: cellClass(v) }, String(v).trim())))),
        ),
      ),
    );
    if (state.openDetails.has(key)) d.open = true;
    return d;
  }

  function nodeFindings(node) {
    // the audit's findings about this node (node-failing, stale labels...), as `audit` says them
    const found = Array.isArray(node.findings) ? node.findings : [];
    if (!found.length) return null;
    return h(
      "ul",
      { class: "findings", "aria-label": "Audit findings" },
      found.map((f) => h("li", {}, badge(f.severity === "action" ? "bad" : "warn", "!", String(f.kind)), " ", String(f.message))),
    );
  }

  function driftDetails(node) {
    const drift = node.drift || [];
    const agent = node.agent || {};
    const lines = [...drift];
    if (agent.error) lines.unshift(`agent: ${agent.error}`);
    for (const l of node.labels_kept || []) lines.push(`kept: ${l}`);
    if (!lines.length) return null;
    const key = `drift/${node.hostname}`;
    const d = h(
      "details",
      { class: "drift", "data-key": key },
      h("summary", {}, drift.length ? `${drift.length} label difference${drift.length > 1 ? "s" : ""}` : "Agent error"),
      h("ul", {}, lines.map((l) => h("li", {}, l))),
    );
    if (state.openDetails.has(key)) d.open = true;
    return d;
  }

  function groupName(g) {
    // "NVLink group 1" already names its kind; a bare name like "0" gets the kind prefixed
    const kind = KIND_LABEL[g.kind] || g.kind;
    const named = String(g.name || "").toLowerCase().includes(String(kind).toLowerCase());
    return h("b", {}, named ? g.name : `${kind} ${g.name}`);
  }

  function groupChip(g) {
    return h("span", { class: `chip ${kindClass(g.kind, KIND_ORDER, "other")}` }, groupName(g), ` · GPU ${list(g.gpus)}`);
  }

  function nodeCard(node, now, match) {
    const gpus = node.gpus || [];
    const used = gpus.filter(gpuHeld).length;
    const lay = layoutGroups(node);
    const facts = [];
    if (node.labels_state === "gpus-unread") facts.push("GPUs cannot be read");
    if (node.product) facts.push(`${node.gpu_count ?? gpus.length} × ${node.product}`);
    if (node.driver_version) facts.push(`driver ${node.driver_version}`);
    if (node.cuda_driver_version) facts.push(`CUDA ${node.cuda_driver_version}`);
    const titleId = `node-${node.id || node.hostname}`;
    return h(
      "article",
      { class: `node${gpus.length ? "" : " no-gpu"} ls-${kindClass(node.labels_state, Object.keys(LABELS_STATE), "unknown")}`, "aria-labelledby": titleId, "data-node": node.hostname },
      h(
        "header",
        { class: "node-head" },
        h("h2", { id: titleId }, node.hostname, h("span", { class: "role" }, node.role)),
        h("div", { class: "node-badges" }, nodeBadge(node), labelsBadge(node, now)),
      ),
      h(
        "p",
        { class: "facts" },
        facts.length ? facts.join(" · ") : "No GPUs",
        gpus.length ? h("span", { class: "usage" }, ` · ${used}/${gpus.length} GPUs in use`) : null,
        node.zone ? h("span", { class: "zone" }, ` · zone ${node.zone}`) : null,
        node.addr ? h("span", { class: "addr" }, ` · ${node.addr}`) : null,
      ),
      nodeFindings(node),
      driftDetails(node),
      lay.others.length ? h("p", { class: "chips", "aria-label": "Other GPU groups" }, lay.others.map(groupChip)) : null,
      gpus.length
        ? h(
            "div",
            { class: "groups" },
            lay.boxes.map((b) =>
              h(
                "section",
                { class: `group ${b.group ? kindClass(b.group.kind, KIND_ORDER, "other") : "none"}`, "aria-label": b.group ? `${b.group.name}, GPUs ${list(b.group.gpus)}` : b.label || "GPUs" },
                b.group || b.label
                  ? h("h3", { class: "group-label" }, b.group ? groupName(b.group) : b.label)
                  : null,
                h("div", { class: "tiles" }, b.gpus.map((g) => gpuTile(node, g, match))),
              ),
            ),
          )
        : null,
      linkMatrix(node),
    );
  }

  // ---- fleet heat map: one cell per GPU, grouped by node -----------------------
  // Built once per layout (nodes x GPUs, filter, colour); a poll then only rewrites
  // the class of cells that changed, so 8,000 cells update in a few milliseconds.
  // Cells carry no per-cell listeners and no labels until focused or hovered.

  // The colour steps of the heat map's cells v0..v4, the one table cellClass and the
  // legend read: below the first step v0, at or above the last (style.css's hot line) v4.
  // The daemon reads this table too (webmap.color_steps) and refuses a hot line not
  // above its last step: keep each `at: [...], hot: "..."` on one line.
  const PCT_STEPS = { at: [10, 35, 60], hot: "util", unit: " %" };
  const COLOR_STEPS = { util: PCT_STEPS, mem: PCT_STEPS, temp: { at: [45, 60, 72], hot: "temp", unit: " °C" } };
  const colorSteps = (color) => [...COLOR_STEPS[color].at, hotLine(COLOR_STEPS[color].hot)];

  function level(v, steps) {
    let i = 0;
    while (i < steps.length && v >= steps[i]) i++;
    return i; // 0..steps.length
  }

  function cellClass(node, gpu, color, on) {
    let c = "cell";
    if (color === "alloc") {
      const mig = (gpu.mig || []).length > 0;
      const held = gpuHeld(gpu);
      c += mig ? (held ? " a-mig" : " a-migfree") : !held ? " a-free" : shareSum(gpu) < 1000 ? " a-part" : " a-held";
    } else {
      let v = null;
      if (color === "util") v = gpu.util_pct;
      else if (color === "mem") v = known(gpu.memory_used_mib) && gpu.memory_mib ? (gpu.memory_used_mib / gpu.memory_mib) * 100 : (gpu.mig || []).length && gpu.memory_mib ? (migMemory(gpu).held / gpu.memory_mib) * 100 : null;
      else if (color === "temp") v = gpu.temp_c;
      c += !known(v) ? " v-unknown" : ` v${level(v, colorSteps(color))}`;
    }
    if (isSick(gpu)) c += " x-sick";
    else if (isHot(gpu)) c += " x-hot";
    if (isOverShare(gpu)) c += " x-over";
    if (!on) c += " dim";
    return c;
  }

  const COLOR_WORDS = { alloc: "allocation", util: "utilisation", mem: "memory used", temp: "temperature" };

  // "< 10 %", "10–35", ..., "≥ 90 %", "unknown": the swatches of colorSteps' cells
  function scaleSwatches(sw, steps, unit) {
    const between = steps.slice(1).map((s, i) => sw(`v${i + 1}`, `${steps[i]}–${s}`));
    return [sw("v0", `< ${steps[0]}${unit}`), ...between, sw(`v${steps.length}`, `≥ ${steps.at(-1)}${unit}`), sw("v-unknown", "unknown")];
  }

  function legend(color) {
    const sw = (cls, text) => h("span", { class: "lg" }, h("span", { class: `cell ${cls}`, "aria-hidden": "true" }), text);
    const scale =
      color === "alloc"
        ? [sw("a-free", "free (outline)"), sw("a-part", "shared (half)"), sw("a-held", "held (solid)"), sw("a-mig", "MIG, slices held (striped)"), sw("a-migfree", "MIG, all free")]
        : scaleSwatches(sw, colorSteps(color), COLOR_STEPS[color].unit);
    return h(
      "div",
      { class: "legend", "aria-label": `Legend: colour by ${COLOR_WORDS[color]}` },
      h("b", {}, `Colour: ${COLOR_WORDS[color]}.`),
      scale,
      color === "alloc" ? null : h("span", { class: "lg muted" }, "fill height shows the value too"),
      sw("a-free x-sick", "✕ unhealthy"),
      sw("a-free x-hot", "▲ hot"),
      sw("a-free x-over", "⚠ over-share"),
    );
  }

  function nodeMark(node) {
    return isDrifted(node) ? " ls-bad" : node.state !== "ready" || node.availability !== "active" ? " ls-warn" : "";
  }

  // The first screen of blocks is built at once and painted; the rest follow in chunks,
  // one task each, so a 1,000-node map paints its first screen without building all of
  // it (patches of a poll reach the blocks built so far; later chunks read the newest
  // document).
  const FLEET_FIRST = 160; // about a 1366 x 900 screen of node blocks
  const FLEET_CHUNK = 240;

  function fleetBlock(n, color) {
    const on = state.fleet.matches.get(n.hostname);
    const row = h("div", { class: "fn-cells" });
    for (const g of n.gpus) {
      const key = gpuKey(n, g);
      const el = document.createElement("span");
      el.className = cellClass(n, g, color, on.has(g.index)) + (key === state.fleetFocus ? " cur" : "");
      el.dataset.key = key;
      el.setAttribute("role", "button");
      if (key === state.fleetFocus) el.tabIndex = 0;
      row.append(el);
      state.fleet.cells.push(el);
    }
    const fn = h("div", { class: `fn${nodeMark(n)}`, "data-node": n.hostname }, h("span", { class: "fn-name" }, n.hostname), row);
    state.fleet.blocks[n.hostname] = fn;
    return fn;
  }

  function buildFleet(upto) {
    // blocks [built, upto) of the current layout, appended to its grid
    const f = state.fleet;
    const part = document.createDocumentFragment();
    const end = Math.min(upto, f.shown.length);
    for (; f.built < end; f.built++) part.append(fleetBlock(f.shown[f.built], f.color));
    f.grid.append(part);
    if (f.built < f.shown.length) afterPaint(f, () => buildFleet(f.built + FLEET_CHUNK), "background");
    else {
      f.grid.style.minHeight = ""; // the first frame's estimate (sketchFleet)
      state.perf.fleetBuilt = performance.now();
    }
  }

  function afterPaint(f, fn, priority) {
    // after this frame is painted; "background": a poll's work comes first. Dropped when
    // the layout was rebuilt since (another filter, colour or set of nodes).
    const next = () => state.fleet === f && fn();
    requestAnimationFrame(() => (window.scheduler?.postTask ? window.scheduler.postTask(next, { priority }) : setTimeout(next, 0)));
  }

  function unsketch(f) {
    // the interactive blocks for the whole first screen at once, in place of its canvas
    f.sketch.canvas.remove();
    buildFleet(Math.max(FLEET_FIRST, f.sketch.blocks));
  }

  // ---- the first frame of a big fleet: one canvas ----------------------------------
  // The first paint from the light document draws the node blocks that fit the screen on
  // one <canvas>: one element, where the blocks are about 11 each (a first screen of
  // ~180 blocks was ~2,000 elements to style, lay out and paint, twice the whole 5-node
  // page). The interactive blocks replace it in the first task after that frame is
  // painted. Sizes mirror style.css (.fn, .fn-name, .cell); colours and fill heights are
  // its custom properties, read here (so one source, and the dark theme holds); the
  // meaning comes from cellClass, the same classes the cells get.
  const FN_W = 66; // .fn width
  const FN_GAP = 6; // .fleet gap
  const CELL = 14; // .cell
  const CELL_GAP = 2; // .fn-cells gap, four cells a row
  const NAME_H = Math.floor(14 * 0.62 * 1.1 * 64) / 64; // .fn-name line box (html 14px), layout units

  const SKETCH_FILL = {
    // class -> [fill, border, fill height (1 = whole), pattern]: style.css's custom
    // properties (cellLook reads them), numbers where the CSS has none
    "a-free": [null, "--free-edge", 0],
    "a-held": ["--held", "--held-edge", 1],
    "a-part": ["--held", "--held-edge", "--part-h"],
    "a-mig": ["--mig", "--mig-edge", 1, "mig"],
    "a-migfree": ["--migfree", "--free-edge", 1, "migfree"],
    v0: ["--v0", null, "--v0-h"],
    v1: ["--v1", null, "--v1-h"],
    v2: ["--v2", null, "--v2-h"],
    v3: ["--v3", null, "--v3-h"],
    v4: ["--v4", "--v4-edge", 1],
    "v-unknown": [null, null, 1, "unknown"],
  };

  function blockHeight(n) {
    // .fn: border, padding 2/3, the name, 1 px gap, rows of cells (border-box)
    const rows = Math.ceil((n.gpus || []).length / 4);
    return (isDrifted(n) ? 3 : 1) + 2 + NAME_H + 1 + rows * (CELL + CELL_GAP) - CELL_GAP + 3 + 1;
  }

  function sketchPattern(ctx, kind, css) {
    // the stripes of .a-mig / .a-migfree and the hatch of .v-unknown, as a repeating tile
    // (a CSS stripe period p at 45 degrees repeats every p * 1.41 px along x and y)
    const t = document.createElement("canvas");
    t.width = t.height = kind === "mig" ? 7 : 6;
    const c = t.getContext("2d");
    c.fillStyle = css("--card");
    c.fillRect(0, 0, t.width, t.height);
    c.strokeStyle = css(kind === "mig" ? "--mig" : kind === "migfree" ? "--migfree" : "--muted-bg");
    c.lineWidth = kind === "mig" ? 3 : kind === "migfree" ? 1 : 2;
    c.beginPath();
    for (const o of [-t.width, 0, t.width]) {
      if (kind === "unknown") (c.moveTo(o, 0), c.lineTo(o + t.width, t.height)); // 45deg
      else (c.moveTo(o, t.height), c.lineTo(o + t.width, 0)); // 135deg
    }
    c.stroke();
    return ctx.createPattern(t, "repeat");
  }

  function cellLook(cls, css) {
    // what a cell of these classes is drawn with: border, its width, fill, fill height, marks
    const c = cls.split(" ");
    let spec = null;
    for (const k of c) if (SKETCH_FILL[k]) spec = SKETCH_FILL[k];
    const fill = spec && [spec[0] && css(spec[0]), spec[1] && css(spec[1]),
      typeof spec[2] === "string" ? parseFloat(css(spec[2])) / 100 : spec[2], spec[3]];
    const sick = c.includes("x-sick");
    return {
      border: sick ? css("--bad-ink") : (fill && fill[1]) || css("--line"),
      b: sick ? 2 : 1,
      fill: fill && fill[2] > 0 ? fill : null,
      over: c.includes("x-over"),
      sick,
      hot: !sick && c.includes("x-hot"),
      alpha: c.includes("dim") ? 0.28 : 1,
    };
  }

  function sketchCells(ctx, cells, css) {
    // cells [{x, y, look}] in layers (borders, insides, fills, marks), grouped by colour:
    // whole-pixel rectangles (the canvas's fast path), paths only for the few marks
    const pats = {};
    const layer = (style, alpha, rects, paint) => {
      const groups = new Map();
      for (const r of rects) {
        const key = `${typeof style(r) === "string" ? style(r) : style(r).key}|${r.look.alpha}`;
        if (!groups.has(key)) groups.set(key, { style: style(r), alpha: r.look.alpha, rs: [] });
        groups.get(key).rs.push(r);
      }
      for (const g of groups.values()) {
        ctx.globalAlpha = g.alpha * alpha;
        const st = typeof g.style === "string" ? g.style : (pats[g.style.key] ||= sketchPattern(ctx, g.style.key, css));
        if (paint.path) {
          ctx.beginPath();
          for (const r of g.rs) paint(r);
          if (paint.stroke) (ctx.strokeStyle = st), ctx.stroke();
          else (ctx.fillStyle = st), ctx.fill();
        } else {
          ctx.fillStyle = st;
          for (const r of g.rs) paint(r);
        }
      }
      ctx.globalAlpha = 1;
    };
    const inset = (r, d) => ctx.fillRect(r.x + d, r.y + d, CELL - 2 * d, CELL - 2 * d);
    layer((r) => r.look.border, 1, cells, (r) => ctx.fillRect(r.x, r.y, CELL, CELL));
    layer(() => css("--card"), 1, cells, (r) => inset(r, r.look.b));
    const filled = cells.filter((r) => r.look.fill);
    layer((r) => (r.look.fill[3] ? { key: r.look.fill[3] } : r.look.fill[0]), 1, filled, (r) => {
      const w = CELL - 2 * r.look.b;
      const fh = Math.round(w * r.look.fill[2]);
      ctx.fillRect(r.x + r.look.b, r.y + r.look.b + w - fh, w, fh);
    });
    // the marks: an amber ring (over-share), ✕ on a white veil, ▲ white with a dark edge
    ctx.lineWidth = 2;
    const ring = (r) => ctx.rect(r.x + r.look.b + 1, r.y + r.look.b + 1, CELL - 2 * r.look.b - 2, CELL - 2 * r.look.b - 2);
    ring.path = ring.stroke = true;
    layer(() => "#ffb000", 1, cells.filter((r) => r.look.over), ring);
    const sick = cells.filter((r) => r.look.sick);
    layer(() => "rgb(255 255 255 / 55%)", 1, sick, (r) => inset(r, 2));
    const cross = (r) => (ctx.moveTo(r.x + 4, r.y + 4), ctx.lineTo(r.x + 10, r.y + 10), ctx.moveTo(r.x + 10, r.y + 4), ctx.lineTo(r.x + 4, r.y + 10));
    cross.path = cross.stroke = true;
    layer(() => css("--bad-ink"), 1, sick, cross);
    const hot = cells.filter((r) => r.look.hot);
    const tri = (r) => (ctx.moveTo(r.x + 7, r.y + 3.5), ctx.lineTo(r.x + 10.5, r.y + 9.5), ctx.lineTo(r.x + 3.5, r.y + 9.5), ctx.closePath());
    tri.path = true;
    layer(() => "#fff", 1, hot, tri);
    ctx.lineWidth = 1;
    const edge = (r) => tri(r);
    edge.path = edge.stroke = true;
    layer(() => "rgb(0 0 0 / 60%)", 1, hot, edge);
  }

  function sketchFleet(f) {
    // draw the blocks [0, k) that fit the screen; returns k
    const t0 = performance.now();
    const grid = f.grid;
    grid.style.minHeight = "100vh"; // the page overflows as it will: measure with its scrollbar
    const width = grid.clientWidth;
    const top = grid.getBoundingClientRect().top;
    const per = Math.max(1, Math.floor((width + FN_GAP) / (FN_W + FN_GAP)));
    const rows = [];
    let total = 0;
    for (let i = 0; i < f.shown.length; i += per) {
      const hgt = Math.max(...f.shown.slice(i, i + per).map(blockHeight));
      if (total < innerHeight - top) rows.push(hgt);
      total += hgt + FN_GAP;
    }
    // rows of the nodes still to come (the first screen's document holds a screen of them)
    const more = Math.max(0, (f.expect || 0) - f.shown.length);
    if (more && f.shown.length) total += Math.ceil(more / per) * (blockHeight(f.shown.at(-1)) + FN_GAP);
    grid.style.minHeight = `${Math.max(0, total - FN_GAP)}px`; // until every block is built
    const height = rows.reduce((a, x) => a + x + FN_GAP, 0) - FN_GAP;
    const t1 = performance.now();
    const dpr = window.devicePixelRatio || 1;
    const canvas = h("canvas", { class: "fleet-sketch", "aria-hidden": "true", width: Math.ceil(width * dpr), height: Math.ceil(height * dpr) });
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.scale(dpr, dpr);
    const style = getComputedStyle(document.documentElement);
    const vars = {};
    const css = (v) => (vars[v] ??= style.getPropertyValue(v).trim());
    // where each block goes: rows of `per`, each as tall as its tallest block
    const at = [];
    let y = 0;
    for (const rh of rows) {
      for (let c = 0; c < per && at.length < f.shown.length; c++) {
        const n = f.shown[at.length];
        at.push({ n, x: c * (FN_W + FN_GAP), y, rh, bt: isDrifted(n) ? 3 : 1 });
      }
      y += rh + FN_GAP;
    }
    // the blocks: card, 1 px line (dashed when not ready · active), warn top when drifted;
    // one path per kind of border
    ctx.fillStyle = css("--card");
    ctx.strokeStyle = css("--line");
    ctx.lineWidth = 1;
    for (const dashed of [false, true]) {
      ctx.setLineDash(dashed ? [3, 2] : []);
      ctx.beginPath();
      for (const b of at) if ((nodeMark(b.n) === " ls-warn") === dashed) ctx.roundRect(b.x + 0.5, b.y + 0.5, FN_W - 1, b.rh - 1, 5);
      ctx.fill();
      ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.fillStyle = css("--warn-line");
    for (const b of at) if (b.bt === 3) ctx.fillRect(b.x + 2, b.y, FN_W - 4, 3);
    // names (a long one is cut at the block's edge; the page's ellipsis comes with the blocks)
    ctx.font = `${14 * 0.62}px ${getComputedStyle(document.body).fontFamily}`;
    ctx.fillStyle = css("--muted");
    ctx.textBaseline = "middle";
    for (const b of at) {
      const name = String(b.n.hostname);
      const long = name.length > 9;
      if (long) (ctx.save(), ctx.beginPath(), ctx.rect(b.x + 4, b.y, FN_W - 8, b.rh), ctx.clip());
      ctx.fillText(name, b.x + 4, b.y + b.bt + 2 + NAME_H / 2);
      if (long) ctx.restore();
    }
    const looks = new Map(); // class string -> cellLook
    const cells = [];
    for (const { n, x, y: by, bt } of at) {
      const on = f.matches.get(n.hostname);
      const cy = by + bt + 2 + NAME_H + 1;
      n.gpus.forEach((g, i) => {
        const cls = cellClass(n, g, f.color, on.has(g.index));
        if (!looks.has(cls)) looks.set(cls, cellLook(cls, css));
        // whole pixels, as the page snaps the cells' boxes
        cells.push({ x: x + 4 + (i % 4) * (CELL + CELL_GAP), y: Math.round(cy + Math.floor(i / 4) * (CELL + CELL_GAP)), look: looks.get(cls) });
      });
    }
    sketchCells(ctx, cells, css);
    const k = at.length;
    grid.append(canvas);
    // (``last``: where the last block drawn sits in the grid, ``looks``: what each class
    // was drawn with; both for tests/test_webmap.py)
    f.sketch = { canvas, blocks: k, last: k ? [at[k - 1].x, at[k - 1].y] : null, looks: Object.fromEntries(looks), layout_ms: t1 - t0, draw_ms: performance.now() - t1 };
    return k;
  }

  function renderFleet(doc, nodes, matches, sketch = false) {
    const color = state.color;
    const shown = nodes.filter((n) => matches.get(n.hostname) && (n.gpus || []).length);
    const sig = `${color}|${state.q}|${state.stateFilter}|${shown.map((n) => `${n.hostname}:${n.gpus.length}`).join(",")}`;
    const root = $("nodes");
    const keys = [];
    for (const n of shown) for (const g of n.gpus) keys.push(gpuKey(n, g));
    if (!state.fleetFocus || !keys.includes(state.fleetFocus)) state.fleetFocus = keys[0] || null;
    if (state.fleet && state.fleet.sig === sig && root.querySelector(".fleet")) {
      // same layout: patch classes only (and the labels of cells that have one) of the
      // blocks built so far; the chunks still to come read the new document
      const fl = state.fleet;
      fl.fromLight = false;
      fl.shown = shown;
      fl.matches = matches;
      const { cells: els, keys: ks, labelled } = fl;
      let i = 0;
      for (const n of shown.slice(0, fl.built)) {
        const on = matches.get(n.hostname);
        const fn = fl.blocks[n.hostname];
        const fc = `fn${nodeMark(n)}`;
        if (fn.className !== fc) fn.className = fc;
        for (const g of n.gpus) {
          const el = els[i];
          const c = cellClass(n, g, color, on.has(g.index)) + (ks[i] === state.fleetFocus ? " cur" : "");
          if (el.className !== c) el.className = c;
          if (labelled.has(el)) el.setAttribute("aria-label", escapedText(cellLabel(n, g)));
          i++;
        }
      }
      return;
    }
    const grid = h("div", { class: "fleet", role: "group", "aria-label": `GPU heat map, ${shown.length} nodes, ${keys.length} GPUs. Arrow keys move, Enter opens the node.` });
    const hidden = nodes.length - shown.length;
    // after the first screen's light document (a sketch, or blocks built from it): as many
    // blocks at once as it showed
    const prior = state.fleet?.fromLight && state.fleet.grid.isConnected ? Math.max(state.fleet.built, state.fleet.sketch.blocks) : 0;
    state.fleet = { sig, cells: [], blocks: {}, keys, labelled: new Set(), shown, matches, color, grid, built: 0 };
    replace(
      root,
      legend(color),
      shown.length ? grid : h("p", { class: "empty" }, state.stateFilter === "pending" || /state:pending/.test(state.q) ? "Pending requests hold no GPUs: see Pending requests." : state.stateFilter === "failed" || /state:failed/.test(state.q) ? "No GPU is held by a service whose planning failed: see Services." : "No GPU matches the filter."),
      hidden ? h("p", { class: "muted" }, `${hidden} node${hidden === 1 ? "" : "s"} not shown (no GPUs, or no match).`) : null,
    );
    // the first paint of a big fleet (the light document) is a sketch on one canvas
    if (sketch && shown.length > 0) {
      state.fleet.expect = doc.summary?.nodes;
      state.fleet.fromLight = true; // until the whole document patches or replaces it
      sketchFleet(state.fleet);
      afterPaint(state.fleet, () => unsketch(state.fleet), "user-visible");
    } else buildFleet(Math.max(FLEET_FIRST, prior));
  }

  function cellLabel(node, gpu) {
    return `${gpuLabel(node, gpu)}. Enter opens ${node.hostname}.`;
  }

  function fleetMove(e, key) {
    const cells = state.fleet ? state.fleet.cells : [];
    const i = cells.findIndex((c) => c.dataset.key === key);
    if (i < 0) return;
    const [node] = lookup(key) || [];
    let next = null;
    if (e.key === "ArrowRight") next = cells[i + 1];
    else if (e.key === "ArrowLeft") next = cells[i - 1];
    else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      // same GPU slot on the next / previous node block
      const fn = cells[i].closest(".fn");
      const sib = e.key === "ArrowDown" ? fn.nextElementSibling : fn.previousElementSibling;
      if (sib) {
        const sc = sib.querySelectorAll(".cell");
        next = sc[Math.min([...fn.querySelectorAll(".cell")].indexOf(cells[i]), sc.length - 1)];
      }
    } else if (e.key === "Home") next = cells[0];
    else if (e.key === "End") next = cells[cells.length - 1];
    else if (e.key === "Enter" || e.key === " ") {
      if (node) openNode(node.hostname, key);
    } else return;
    e.preventDefault();
    if (next) focusCell(next);
  }

  function focusCell(el) {
    const old = state.fleet?.cells.find((c) => c.dataset.key === state.fleetFocus);
    if (old && old !== el) {
      old.removeAttribute("tabindex");
      old.classList.remove("cur");
    }
    state.fleetFocus = el.dataset.key;
    el.tabIndex = 0;
    el.classList.add("cur");
    labelCell(el);
    el.focus();
  }

  function labelCell(el) {
    const [n, g] = lookup(el.dataset.key) || [];
    if (n) {
      el.setAttribute("aria-label", escapedText(cellLabel(n, g)));
      el.title = escapedText(gpuLabel(n, g));
      state.fleet?.labelled.add(el); // kept current by later polls
    }
  }

  // ---- the focus panel: one node's card, or one service ---------------------------

  function openNode(host, key) {
    state.focusService = null;
    state.focusNode = host;
    if (key) state.selected = key;
    writeUrl();
    render();
    fetchHistory();
    $("focus").scrollIntoView({ block: "start" });
    const tile = key && $("focus").querySelector(`.gpu[data-key="${CSS.escape(key)}"]`);
    (tile || $("focus")).focus({ preventScroll: true });
  }

  function openService(name) {
    state.focusNode = null;
    state.focusService = name;
    writeUrl();
    render();
    fetchHistory();
    $("focus").scrollIntoView({ block: "start" });
    $("focus").focus({ preventScroll: true });
  }

  function closeFocus() {
    const back = state.focusNode ? state.selected : null;
    state.focusNode = null;
    state.focusService = null;
    writeUrl();
    render();
    const cell = back && document.querySelector(`#nodes [data-key="${CSS.escape(back)}"]`);
    if (cell) cell.classList.contains("cell") ? focusCell(cell) : cell.focus();
  }

  function closeButton(what) {
    return h("button", { type: "button", class: "close", "data-action": "close", "aria-label": `Close ${what}` }, "✕ Close");
  }

  function svcLink(name, extra) {
    return h("button", { type: "button", class: "svc-link", "data-service": name, title: `Open the ${name} service view` }, svcChip(name, extra));
  }

  function renderFocus(doc, now) {
    const el = $("focus");
    let body = null;
    if (state.focusNode) {
      const node = (doc.nodes || []).find((n) => n.hostname === state.focusNode);
      body = node
        ? [h("div", { class: "focus-bar" }, h("span", { class: "crumb" }, "Node"), closeButton(`node ${node.hostname}`)), nodeCard(node, now, null)]
        : [h("div", { class: "focus-bar" }, h("span", { class: "crumb" }, `Node ${state.focusNode} is not in the swarm any more.`), closeButton("node"))];
    } else if (state.focusService) {
      body = serviceView(doc, state.focusService);
    }
    el.hidden = !body;
    if (!body) {
      if (el.childNodes.length) el.replaceChildren();
      return;
    }
    const fresh = el.cloneNode(false);
    fresh.append(...body.flat());
    fresh.hidden = false;
    morph(el, fresh);
  }

  function serviceView(doc, name) {
    const svc = (doc.services || []).find((s) => s.name === name);
    const bar = h("div", { class: "focus-bar" }, h("span", { class: "crumb" }, "Service"), closeButton(`service ${name}`));
    if (!svc) return [bar, h("p", { class: "muted" }, `No GPU service named ${name} in this swarm.`)];
    const [k, icon] = SERVICE_STATUS[svc.status] || ["muted", "?"];
    const hosts = new Map((doc.nodes || []).map((n) => [n.hostname, n]));
    const rows = [];
    for (const p of svc.placements || []) {
      const node = hosts.get(p.node);
      (p.gpus || []).forEach((idx, i) => {
        const gpu = node && (node.gpus || []).find((g) => g.index === idx);
        const uuid = (p.uuids || [])[i];
        const slice = gpu && (gpu.mig || []).find((m) => m.uuid === uuid);
        const holder = gpu && (gpu.holders || []).find((x) => x.service === name);
        const tasks = holder ? holder.tasks || [] : slice && slice.holder && slice.holder.task ? [slice.holder.task] : [];
        const milli = (p.share_milli || [])[i];
        rows.push(
          h(
            "tr",
            {},
            h("th", { scope: "row" }, h("button", { type: "button", class: "link", "data-open-node": p.node, "data-gpu": String(idx) }, p.node)),
            h("td", {}, `GPU ${idx}`, slice ? ` · MIG ${slice.profile}` : "", share(milli) ? ` · ${share(milli)}` : "", holder ? holderBadges(holder, gpu, node) : null),
            h("td", {}, gpu ? (slice ? (known(slice.memory_used_mib) ? `${used(slice.memory_used_mib)} / ${gib(slice.memory_mib)} GiB` : `${gib(slice.memory_mib)} GiB slice`) : `${known(gpu.memory_used_mib) ? used(gpu.memory_used_mib) : "?"} / ${gib(gpu.memory_mib)} GiB`) : "?"),
            h("td", {}, gpu ? pct(gpu.util_pct) + (isHot(gpu) ? " ▲" : "") : "?"),
            h("td", {}, gpu ? (isSick(gpu) ? "✕ " : "✓ ") + (healthText(gpu) || (gpu.healthy === false ? "unhealthy" : "healthy")) : "GPU not reported"),
            h("td", {}, gpu ? spark(gpu) : null),
            h("td", {}, tasks.length ? tasks.map((t) => h("code", { title: t }, shortId(t))) : "none running"),
          ),
        );
      });
    }
    const moves = doc.moves || {};
    const proposed = (moves.proposed || []).filter((m) => m.service === name);
    const recent = (moves.recent || []).filter((m) => m.service === name);
    const now = num(doc.generated_at) || Date.now() / 1000;
    return [
      bar,
      h(
        "article",
        { class: "service-view", "aria-labelledby": "svc-title", "data-service": name },
        h("header", { class: "node-head" }, h("h2", { id: "svc-title" }, svcChip(name)), h("div", { class: "node-badges" }, badge(k, icon, svc.status), svc.state ? badge("muted", "·", svc.state) : null)),
        dl([["Request", svc.request || "?"], ["Replicas placed", String((svc.placements || []).length)], svc.reason ? [svc.status === "placed" ? "Note" : svc.status === "done" ? "Run" : svc.status === "failed" ? "Why failed" : svc.status === "invalid" ? "Why invalid" : "Why pending", svc.reason] : null,
          // global services: the GPU nodes that wait; jobs: the run's progress
          svc.mode ? ["Mode", svc.mode] : null, svc.progress && svc.status !== "done" ? ["Progress", svc.progress] : null,
          // config tenants: whose it is, and what its labels asked beyond the tenant's limits
          svc.tenant ? ["Tenant", svc.tenant] : null, ...(svc.limits || []).map((why) => ["Limited", why]),
          ...Object.entries(svc.nodes_waiting || {}).map(([host, why]) => [`Waiting: ${host}`, why])]),
        (svc.warnings || []).length ? h("ul", { class: "warnings" }, svc.warnings.map((w) => h("li", {}, "! ", w))) : null,
        h("h3", {}, "Where it runs"),
        rows.length
          ? h(
              "table",
              { class: "replicas" },
              h("thead", {}, h("tr", {}, ["Node", "GPU", "Memory", "Util", "Health", `Last ${HISTORY_WINDOW}`, "Tasks"].map((t) => h("th", { scope: "col" }, t)))),
              h("tbody", {}, rows),
            )
          : h("p", { class: "muted" }, "No GPUs held."),
        h("h3", {}, "Proposed moves ", h("span", { class: "count" }, String(proposed.length))),
        proposed.length ? h("ul", { class: "items" }, proposed.map((m) => h("li", {}, moveRoute(m), moveMeta(m)))) : h("p", { class: "muted" }, "None."),
        h("h3", {}, "Past moves ", h("span", { class: "count" }, String(recent.length))),
        recent.length ? h("ul", { class: "items" }, recent.map((m) => h("li", {}, recentMeta(m, now), moveRoute(m), m.reason ? h("div", { class: "reason" }, m.reason) : null))) : h("p", { class: "muted" }, "None recorded."),
      ),
    ];
  }

  // ---- side panels ---------------------------------------------------------

  function findGpu(key) {
    for (const node of state.doc?.nodes || []) for (const gpu of node.gpus || []) if (gpuKey(node, gpu) === key) return [node, gpu];
    return [null, null];
  }

  function dl(rows) {
    return h("dl", { class: "kv" }, rows.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function renderInspector() {
    const el = $("inspector");
    const [node, gpu] = findGpu(state.selected);
    if (!gpu) {
      replace(el, h("h2", {}, "GPU details"), h("p", { class: "hint" }, "Tab to a GPU tile or click it to see its details here. Arrow keys move between tiles; Escape clears."));
      return;
    }
    const groups = (node.groups || []).filter((g) => (g.gpus || []).includes(gpu.index));
    const holders = gpu.holders || [];
    replace(
      el,
      h("h2", {}, `${node.hostname} · GPU ${gpu.index}`),
      dl([
        ["Product", gpu.product || node.product || "?"],
        ["UUID", h("code", {}, gpu.uuid || "?")],
        [
          "Memory",
          known(gpu.memory_used_mib)
            ? `${gib(gpu.memory_used_mib)} of ${gib(gpu.memory_mib)} GiB used`
            : (gpu.mig || []).length
              ? `${gib(migMemory(gpu).held)} of ${gib(gpu.memory_mib)} GiB in held MIG slices`
              : `${gib(gpu.memory_mib)} GiB (usage unknown)`,
        ],
        ["Utilisation", pct(gpu.util_pct) + (isHot(gpu) ? " ▲ hot" : "")],
        ["Temperature", known(gpu.temp_c) ? `${round(gpu.temp_c)} °C${gpu.temp_c >= hotLine("temp") ? " ▲" : ""}` : "not reported"],
        ["Power", known(gpu.power_w) ? `${round(gpu.power_w)} W` : "not reported"],
        ["XID", known(gpu.xid) ? (gpu.xid > 0 ? `✕ last XID ${gpu.xid}` : "none") : "not reported"],
        ["ECC", known(gpu.ecc_sbe) || known(gpu.ecc_dbe) ? `${round(gpu.ecc_sbe)} corrected, ${round(gpu.ecc_dbe)} uncorrectable` : "not reported"],
        ["Zone", node.zone || "none"],
        ["NUMA node", known(gpu.numa_node) ? String(gpu.numa_node) : "unknown"],
        ["Groups", groups.length ? groups.map((g) => `${g.name} (${KIND_LABEL[g.kind] || g.kind})`).join(", ") : "none"],
        ["Health", gpu.healthy === false ? `✕ unhealthy${gpu.error ? ": " + gpu.error : ""}` : isSick(gpu) ? "✕ errors reported (see XID / ECC)" : "✓ healthy"],
      ]),
      h("h3", {}, `Last ${HISTORY_WINDOW}`),
      chart(gpu),
      h("h3", {}, "Held by"),
      holders.length
        ? h(
            "ul",
            { class: "held-list" },
            holders.map((x) =>
              h(
                "li",
                {},
                svcChip(x.service, share(x.share_milli) || slotText(x)),
                holderBadges(x, gpu, node),
                x.request ? h("div", { class: "req" }, `Request: ${x.request}`) : null,
                h("div", { class: "tasks" }, `Task${(x.tasks || []).length === 1 ? "" : "s"}: `, (x.tasks || []).map((t) => h("code", { title: t }, shortId(t))), (x.tasks || []).length ? null : "none running"),
              ),
            ),
          )
        : h("p", { class: "muted" }, (gpu.mig || []).length ? "Whole GPU not held; see MIG slices." : "Nobody: this GPU is free."),
      (gpu.mig || []).length
        ? [
            h("h3", {}, "MIG slices"),
            h(
              "ul",
              { class: "mig-list" },
              gpu.mig.map((m) =>
                h("li", {}, h("b", {}, m.profile), known(m.memory_used_mib) ? ` · ${used(m.memory_used_mib)} of ${gib(m.memory_mib)} GiB used · ` : ` · ${gib(m.memory_mib)} GiB · `, m.holder ? [svcChip(m.holder.service), " task ", h("code", { title: m.holder.task }, shortId(m.holder.task))] : "free"),
              ),
            ),
          ]
        : null,
    );
  }

  const panelMemo = {};

  function unchanged(id, ...parts) {
    // side panels are rebuilt only when what they show changed (a fleet polls often)
    const sig = JSON.stringify(parts);
    if (panelMemo[id] === sig) return true;
    panelMemo[id] = sig;
    return false;
  }

  function capped(items, render, what) {
    // a fleet has thousands of services: show the first LIST_CAP, say how many more
    const shown = items.slice(0, LIST_CAP).map(render);
    if (items.length > LIST_CAP) shown.push(h("li", { class: "more muted" }, `${items.length - LIST_CAP} more ${what}: narrow them with Search (service:, node:).`));
    return h("ul", { class: "items" }, shown);
  }

  function renderPending(doc, f) {
    const all = doc.pending || [];
    const svcs = f.active ? new Map((doc.services || []).map((s) => [s.name, s])) : null;
    const items = f.active ? all.filter((p) => serviceOk(svcs.get(p.service) || { name: p.service, status: "pending" }, f)) : all;
    if (unchanged("pending", all.length, items.slice(0, LIST_CAP), items.length)) return;
    replace(
      $("pending"),
      h("h2", { id: "pending-h" }, "Pending requests ", h("span", { class: "count" }, items.length === all.length ? String(all.length) : `${items.length} of ${all.length}`)),
      items.length
        ? capped(
            items,
            (p) => h("li", { class: "pending-item" }, h("div", {}, badge("warn", "◔", "pending"), " ", svcLink(p.service)), h("div", { class: "req" }, p.request), h("div", { class: "reason" }, h("b", {}, "Why: "), p.reason || "no reason given")),
            "pending",
          )
        : h("p", { class: "muted" }, all.length ? "None match the filter." : "None: every GPU request is placed."),
    );
  }

  function renderUngranted(doc, f) {
    // services on GPU nodes that see GPUs without a grant (swarmgpu/manager/services/grants.py)
    const all = doc.ungranted || [];
    const items = f.active ? all.filter((u) => serviceOk({ name: u.service, placements: (u.nodes || []).map((n) => ({ node: n })) }, f)) : all;
    if (unchanged("ungranted", all.length, items.slice(0, LIST_CAP), items.length)) return;
    replace(
      $("ungranted"),
      h("h2", { id: "ungranted-h" }, "Ungranted GPU access ", h("span", { class: "count" }, items.length === all.length ? String(all.length) : `${items.length} of ${all.length}`)),
      items.length
        ? capped(
            items,
            (u) =>
              h(
                "li",
                { class: "ungranted-item" },
                h("div", {}, u.exempt ? badge("muted", "○", "exempt") : badge("bad", "⚠", u.known ? "ungranted" : "ungranted (unknown)"), " ", svcChip(u.service), ` on ${list(u.nodes || [])}`),
                h("div", { class: "reason" }, h("b", {}, "Why: "), u.reason || "?"),
                h("div", { class: "reason" }, h("b", {}, "Fix: "), u.fix || "?"),
              ),
            "services",
          )
        : h("p", { class: "muted" }, all.length ? "None match the filter." : "None: every service on a GPU node sees only the GPUs placement granted it."),
    );
  }

  function renderUnkeyed(doc) {
    // nodes and services the engine listed without an ID (swarm/unkeyed.py): left out of
    // every list, so in no node's card nor the services' panel; each message names its
    // position, its name and the fix. Shown only while there are some.
    const all = arr(doc.unkeyed);
    if (unchanged("unkeyed", all.slice(0, LIST_CAP), all.length)) return;
    const el = $("unkeyed");
    el.hidden = !all.length;
    replace(
      el,
      h("h2", { id: "unkeyed-h" }, "Left out of the engine's lists ", h("span", { class: "count" }, String(all.length))),
      all.length ? capped(all, (m) => h("li", { class: "unkeyed-item" }, h("div", {}, badge("bad", "✕", "left out")), h("div", { class: "reason" }, text(m))), "entries") : null,
    );
  }

  function moveRoute(m) {
    return h("div", { class: "route" }, svcLink(m.service), " ", m.from, " → ", m.to, arr(m.gpus).length ? ` (GPU ${list(m.gpus)})` : "");
  }

  function moveMeta(m) {
    return [
      h("div", { class: "meta" }, [m.trigger && text(m.trigger), m.window ? `over ${text(m.window)}` : null].filter(Boolean).join(" · ")),
      m.reason ? h("div", { class: "reason" }, h("b", {}, "Why: "), m.reason) : null,
      m.gain ? h("div", { class: "gain" }, h("b", {}, "Gain: "), m.gain) : null,
    ];
  }

  function recentMeta(m, now) {
    return h(
      "div",
      { class: "meta" },
      h("time", { datetime: iso(m.at) }, clock(m.at)),
      num(m.at) === null ? " " : ` (${ago(now - m.at)}) `,
      m.outcome === "done" ? badge("ok", "✓", "done") : m.outcome === "rolled-back" ? badge("warn", "↶", "rolled back") : badge("muted", "?", m.outcome ? text(m.outcome) : "unknown"),
    );
  }

  function renderMoves(doc, now, f) {
    const moves = doc.moves || {};
    const ok = (m) => !f.active || serviceOk({ name: m.service, placements: [{ node: m.from }, { node: m.to }] }, f);
    const proposed = (moves.proposed || []).filter(ok);
    const recent = (moves.recent || []).filter(ok);
    if (unchanged("moves", now, proposed.slice(0, LIST_CAP), proposed.length, recent.slice(0, LIST_CAP), recent.length)) return;
    replace(
      $("moves"),
      h("h2", { id: "moves-h" }, "Rebalancing"),
      h("h3", {}, "Proposed ", h("span", { class: "count" }, String(proposed.length))),
      proposed.length ? capped(proposed, (m) => h("li", {}, moveRoute(m), moveMeta(m)), "proposed moves") : h("p", { class: "muted" }, "No moves proposed."),
      h("h3", {}, "Recent ", h("span", { class: "count" }, String(recent.length))),
      recent.length ? capped(recent, (m) => h("li", {}, recentMeta(m, now), moveRoute(m), m.reason ? h("div", { class: "reason" }, m.reason) : null), "recent moves") : h("p", { class: "muted" }, "No recent moves."),
    );
  }

  const SERVICE_STATUS = { placed: ["ok", "✓"], pending: ["warn", "◔"], invalid: ["bad", "✕"], done: ["muted", "✓"], released: ["muted", "·"], failed: ["bad", "✕"] };

  function renderServices(doc, f) {
    const all = doc.services || [];
    const svcs = f.active ? all.filter((s) => serviceOk(s, f)) : all;
    if (unchanged("services", all.length, svcs.slice(0, LIST_CAP), svcs.length)) return;
    replace(
      $("services"),
      h("h2", { id: "services-h" }, "Services ", h("span", { class: "count" }, svcs.length === all.length ? String(all.length) : `${svcs.length} of ${all.length}`)),
      svcs.length
        ? capped(
            svcs,
            (s) => {
              const [k, icon] = SERVICE_STATUS[s.status] || ["muted", "?"];
              return h(
                "li",
                {},
                h("div", {}, svcLink(s.name), " ", badge(k, icon, s.status), s.state ? h("span", { class: "meta" }, ` ${s.state}`) : null),
                h("div", { class: "req" }, s.request),
                arr(s.placements).slice(0, 4).map((p) => h("div", { class: "meta" }, `${text(p.node)}: ${arr(p.gpus).length ? `GPU ${list(p.gpus)}` : "no GPU"}`)), // gpus: "0" holds a place, no GPU
                (s.placements || []).length > 4 ? h("div", { class: "meta" }, `and ${s.placements.length - 4} more replicas`) : null,
                s.reason ? h("div", { class: "reason" }, s.reason) : null,
              );
            },
            "services",
          )
        : h("p", { class: "muted" }, all.length ? "None match the filter." : "No GPU services."),
    );
  }

  function renderSummary(doc) {
    const nodes = doc.nodes || [];
    let total = 0;
    let used = 0;
    let hot = 0;
    let sick = 0;
    for (const n of nodes)
      for (const g of n.gpus || []) {
        total++;
        if (gpuHeld(g)) used++;
        if (isHot(g)) hot++;
        if (isSick(g)) sick++;
      }
    let drifted = nodes.filter(isDrifted).length;
    let count = nodes.length;
    // the first screen's light document holds a screen of nodes: the daemon counted them all
    // (webmap.summary_counts, held equal to these counts by tests/test_webmap.py)
    if (doc.light && doc.first && doc.summary) ({ nodes: count, gpus: total, used, hot, sick, drifted } = doc.summary);
    // services whose planning raised (placement.isolate): what an operator must see first
    const failedCount = doc.failed_count ?? (doc.services || []).filter((s) => s.status === "failed").length;
    const pendingCount = doc.pending_count ?? (doc.pending || []).length; // the light document counts them
    const ungrantedCount = doc.ungranted_count ?? (doc.ungranted || []).filter((u) => !u.exempt).length; // exempt ones not counted
    // entries the engine listed without an ID (the light document counts them)
    const unkeyedCount = doc.unkeyed_count ?? arr(doc.unkeyed).length;
    const item = (k, v, warn) => h("div", { class: warn ? "warn" : "" }, h("dt", {}, k), h("dd", {}, v));
    replace(
      $("summary"),
      item("Nodes", String(count)),
      item("GPUs in use", `${used} / ${total}`),
      item("Failed", String(failedCount), failedCount > 0),
      item("Pending", String(pendingCount), pendingCount > 0),
      item("Ungranted", String(ungrantedCount), ungrantedCount > 0),
      item("Hot", String(hot), hot > 0),
      item("Unhealthy", String(sick), sick > 0),
      item("Label issues", String(drifted), drifted > 0),
      unkeyedCount > 0 ? item("Left out", String(unkeyedCount), true) : null,
      // while the daemon cannot ask its engine, who leads is unknown (as /healthz says),
      // not "follower": no write goes out until it answers again
      Object.hasOwn(ENGINE_DOWN, doc.engine ?? "")
        ? item("Role", `unknown: ${ENGINE_DOWN[doc.engine]}`, true)
        : doc.leader === false ? item("Role", "follower") : null,
      lastCycleItem(doc, item),
    );
  }

  // the cluster document's engine word while who leads is unknown (cycle/observe.py):
  // unreachable, or an engine that answers with its swarm node stalled (Docker's
  // Swarm.LocalNodeState), named so: the map shows no engine_error, and the fix differs
  const ENGINE_DOWN = {
    unreachable: "engine unreachable",
    locked: "swarm locked (docker swarm unlock on it)",
    error: "swarm node failed to start",
    inactive: "engine in no swarm",
  };

  // /healthz's word for a cycle cut short (cycle/healthz.py cycle_word), for people
  const CYCLE_CUT = {
    over_budget: "cut at its engine budget",
    stopped: "stopped before its end",
    aborted: "did not complete",
  };

  function lastCycleItem(doc, item) {
    // a cycle cut short builds no document: the map still draws the last whole cycle's,
    // so say so, with /healthz's word and when, until a cycle completes
    const why = CYCLE_CUT[doc.last_cycle];
    if (!why) return null;
    const at = typeof doc.last_cycle_at === "number"
      ? ` at ${new Date(doc.last_cycle_at * 1000).toLocaleTimeString([], { hour12: false })}` : "";
    return item("Last cycle", `${doc.last_cycle}: ${why}${at}; the map shows the last whole cycle`, true);
  }

  const COLLATOR = new Intl.Collator(undefined, { numeric: true });
  let sortMemo = { sig: null, order: [] };

  function sortedNodes(doc) {
    // GPU nodes first, then by name ("node-2" before "node-10"), so cards keep their
    // place; a poll with the same nodes reuses the last order instead of sorting again
    const nodes = arr(doc.nodes);
    const sig = nodes.map((n) => `${n.hostname}${(n.gpus || []).length ? "" : "!"}`).join("\n");
    if (sig !== sortMemo.sig) {
      const order = nodes.map((_, i) => i);
      order.sort((i, j) => Number(!(nodes[i].gpus || []).length) - Number(!(nodes[j].gpus || []).length) || COLLATOR.compare(String(nodes[i].hostname), String(nodes[j].hostname)));
      sortMemo = { sig, order };
    }
    return sortMemo.order.map((i) => nodes[i]);
  }

  // data-key -> [node, gpu], built when first asked after a poll (hover, focus, keys)
  let indexMemo = { doc: null, map: new Map() };

  function lookup(key) {
    if (indexMemo.doc !== state.doc) {
      const map = new Map();
      for (const n of state.doc?.nodes || []) for (const g of n.gpus || []) map.set(gpuKey(n, g), [n, g]);
      indexMemo = { doc: state.doc, map };
    }
    return indexMemo.map.get(key);
  }

  function mode(doc) {
    if (state.view !== "auto") return state.view;
    return (doc.nodes || []).length > FLEET_AUTO_NODES ? "fleet" : "cards";
  }

  function renderNodes(doc, now, nodes, matches, f) {
    const active = document.activeElement?.dataset?.key;
    const shown = nodes.filter((n) => matches.get(n.hostname));
    const fresh = $("nodes").cloneNode(false);
    fresh.append(...(shown.length ? shown.map((n) => nodeCard(n, now, f.active ? matches.get(n.hostname) : null)) : [h("p", { class: "empty" }, nodes.length ? "No node matches the filter." : "No nodes in this swarm.")]));
    morph($("nodes"), fresh);
    // morph keeps the focused tile in place; refocus only if it had to be rebuilt
    if (active && document.activeElement?.dataset?.key !== active) {
      document.querySelector(`[data-key="${CSS.escape(active)}"]`)?.focus({ preventScroll: true });
    }
  }

  function render() {
    const doc = state.doc;
    if (!doc) return;
    const t0 = performance.now();
    const now = num(doc.generated_at) || Date.now() / 1000; // judge ages by the daemon's clock
    const f = parseFilter(state.q, state.stateFilter);
    const nodes = sortedNodes(doc);
    const matches = new Map();
    let gpuHits = 0;
    let gpuAll = 0;
    for (const n of nodes) {
      const m = f.active ? filterNode(n, f) : ALL;
      if (m) matches.set(n.hostname, m);
      gpuAll += (n.gpus || []).length;
      gpuHits += m === ALL ? (n.gpus || []).length : m ? m.size : 0;
    }
    state.gpuCount = gpuAll;
    const t1 = performance.now();
    const view = mode(doc);
    document.body.dataset.view = view;
    // A part that throws on a shape no formatter expected keeps its last drawing and is
    // named in the banner; the other parts, and every later poll, still draw.
    state.rendering = true;
    const failed = [];
    const part = (name, fn) => {
      try {
        fn();
      } catch (err) {
        failed.push(`${name} (${err?.message || "error"})`);
        for (const k in panelMemo) delete panelMemo[k]; // tried again on the next poll
      }
    };
    part("Summary", () => renderSummary(doc));
    part("Focus", () => renderFocus(doc, now));
    if (view === "fleet") part("Map", () => renderFleet(doc, nodes, matches));
    else {
      state.fleet = null;
      part("Map", () => renderNodes(doc, now, nodes, matches, f));
    }
    const t2 = performance.now();
    part("Left out of the engine's lists", () => renderUnkeyed(doc));
    part("Ungranted GPU access", () => renderUngranted(doc, f));
    part("Pending requests", () => renderPending(doc, f));
    part("Rebalancing", () => renderMoves(doc, now, f));
    part("Services", () => renderServices(doc, f));
    part("GPU details", renderInspector);
    const drawError = failed.length ? `Part of the page could not be drawn from the daemon's document: ${failed.join(", ")}. Report it with the answer of ${API}.` : null;
    if (drawError !== state.drawError) {
      state.drawError = drawError;
      renderLive();
    }
    const words = f.bad.length ? `Unknown state ${f.bad.join(", ")}: use ${STATES.join(", ")}.` : f.active ? `${matches.size} of ${nodes.length} nodes, ${gpuHits} of ${gpuAll} GPUs match.` : "";
    if ($("matches").textContent !== words) $("matches").textContent = words;
    state.rendering = false;
    const ms = performance.now() - t0;
    state.perf.renders++;
    state.perf.last = { render_ms: ms, prep_ms: t1 - t0, map_ms: t2 - t1, panels_ms: performance.now() - t2, at_ms: performance.now(), nodes: nodes.length, gpus: gpuAll, view };
    if (state.perf.first === null) performance.mark("swarmgpu:first-render");
    performance.mark("swarmgpu:render");
  }

  // ---- interaction ---------------------------------------------------------

  function select(key) {
    if (state.rendering || state.selected === key) return;
    state.selected = key;
    for (const t of document.querySelectorAll(".gpu")) {
      const on = t.dataset.key === key;
      t.classList.toggle("selected", on);
      t.setAttribute("aria-pressed", on ? "true" : "false");
    }
    if (state.focusNode) writeUrl();
    renderInspector();
  }

  function tileKey(e, key, scope) {
    const tiles = [...scope.querySelectorAll(".gpu")];
    const i = tiles.findIndex((t) => t.dataset.key === key);
    let next = null;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") next = tiles[i + 1];
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") next = tiles[i - 1];
    else if (e.key === "Enter" || e.key === " ") {
      select(key);
      $("inspector").scrollIntoView({ block: "nearest" });
    } else if (e.key === "Escape") {
      if (state.focusNode && scope.id === "focus") return closeFocus();
      state.selected = null;
      tiles.forEach((t) => (t.classList.remove("selected"), t.setAttribute("aria-pressed", "false")));
      renderInspector();
    } else return;
    e.preventDefault();
    next?.focus();
  }

  // ---- polling & liveness --------------------------------------------------

  function renderLive() {
    const age = state.lastOkAt === null ? null : (Date.now() - state.lastOkAt) / 1000;
    const stale = state.error !== null || age === null || age * 1000 > STALE_AFTER_MS;
    document.body.classList.toggle("stale", stale && state.doc !== null);
    $("dot").className = `dot ${state.paused ? "paused" : stale ? "off" : "on"}`;
    const words = state.paused ? "Paused" : stale ? (state.doc ? "Offline" : "Connecting…") : "Live";
    if ($("live").textContent !== words) $("live").textContent = words; // announce changes only
    $("updated").textContent = state.lastOkAt ? `last updated ${new Date(state.lastOkAt).toLocaleTimeString([], { hour12: false })}` : "";

    // role=alert re-announces on every change: touch the banner only when its words change
    const banner = $("banner");
    const msg = escapedText(state.error // the daemon's error may quote others' text
      ? (state.doc ? "Offline: the map is stale. " : "Cannot load the cluster. ") +
        state.error +
        (state.doc ? ` Showing data from ${new Date(state.lastOkAt).toLocaleTimeString([], { hour12: false })}.` : "") +
        ` Retrying every ${POLL_MS / 1000} s.`
      : state.drawError || "");
    if (banner.textContent !== msg) banner.textContent = msg;
    banner.hidden = !msg;
  }

  function togglePause() {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume updates" : "Pause updates";
    $("pause").setAttribute("aria-pressed", state.paused ? "true" : "false");
    renderLive();
    if (!state.paused) poll();
    else clearTimeout(timer);
  }

  function historyQuery() {
    // only what is on screen: one node, one service, or a small cluster's cards
    if (!state.doc) return null;
    if (mode(state.doc) === "cards" && state.gpuCount <= 256) return "";
    if (state.focusNode) return `node=${encodeURIComponent(state.focusNode)}`;
    if (state.focusService) return `service=${encodeURIComponent(state.focusService)}`;
    return null;
  }

  async function fetchHistory() {
    const q = historyQuery();
    if (q === null) return;
    try {
      const resp = await fetch(`${HISTORY_API}?window=${HISTORY_WINDOW}&points=60${q ? "&" + q : ""}`, { cache: "no-store", headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(resp.status === 404 ? "this daemon keeps no history." : `${HISTORY_API} answered HTTP ${resp.status}.`);
      const doc = await resp.json();
      if (doc.error) throw new Error(doc.error);
      for (const g of doc.gpus || []) state.hist.set(g.uuid, g);
      state.histError = null;
    } catch (err) {
      state.histError = err.message || String(err);
    }
    state.histFor = q;
    render();
  }

  let timer = null;

  function firstScreenNodes() {
    // at least the node blocks a screen holds, as the first request asks for: the map
    // column's width (.layout: padding, the side column) over a block's, rows of the
    // shortest block (one row of cells) down the window
    const w = innerWidth > 1020 ? innerWidth - 36 - 340 - 16 : innerWidth - 36;
    const per = Math.max(1, Math.floor((w + FN_GAP) / (FN_W + FN_GAP)));
    return per * Math.max(1, Math.ceil(innerHeight / (blockHeight({ gpus: [0] }) + FN_GAP)));
  }

  function renderLight(doc) {
    // the fleet heat map and the summary from the light document (first poll of a big
    // cluster); the panels wait for the whole document, fetched right after
    const t0 = performance.now();
    const nodes = sortedNodes(doc);
    const matches = new Map(nodes.map((n) => [n.hostname, ALL]));
    document.body.dataset.view = "fleet";
    renderSummary(doc);
    const t1 = performance.now();
    renderFleet(doc, nodes, matches, true);
    const gpus = nodes.reduce((a, n) => a + (n.gpus || []).length, 0);
    state.perf.last = { render_ms: performance.now() - t0, prep_ms: t1 - t0, map_ms: performance.now() - t1, panels_ms: 0, at_ms: performance.now(), nodes: nodes.length, gpus, view: "fleet", light: true, sketch: state.fleet?.sketch ? { ...state.fleet.sketch, canvas: undefined } : null };
  }

  function notePerf(t0, parsed, full) {
    // what bench_map.py reads: parse, build/patch the DOM, and the next paint
    const last = { ...state.perf.last, parse_ms: parsed - t0, apply_ms: performance.now() - t0 };
    if (state.perf.first === null) {
      // what the first frame holds (tests/test_webmap.py compares it with the 5-node page's)
      last.elements = document.getElementsByTagName("*").length;
      state.perf.first = last;
    }
    if (full && !state.perf.full) state.perf.full = last;
    if (full) state.perf.updates = [...(state.perf.updates || []).slice(-19), last];
    requestAnimationFrame(() => setTimeout(() => {
      last.painted_ms = performance.now() - t0;
      last.painted_at_ms = performance.now();
    }, 0));
  }

  async function poll() {
    clearTimeout(timer);
    const ctl = new AbortController();
    let kill = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    let waited = TIMEOUT_MS; // what the abort, if it comes, waited for
    let changed = false;
    let again = POLL_MS;
    // First poll: the light document (webmap.light_doc), which paints a big fleet's heat
    // map long before the whole document (ten times the bytes) is parsed and drawn; for a
    // small cluster the daemon answers the whole document to it.
    const light = state.doc === null && !state.lightSeen;
    try {
      const resp = await fetch(light ? `${API}?view=map&first=${firstScreenNodes()}` : API, { cache: "no-store", signal: ctl.signal, headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(`${API} answered HTTP ${resp.status}.`);
      clearTimeout(kill);
      kill = setTimeout(() => ctl.abort(), (waited = BODY_TIMEOUT_MS));
      const text = await resp.text();
      if (text !== state.lastText) {
        const t0 = performance.now();
        let doc;
        try {
          doc = JSON.parse(text);
        } catch {
          throw new Error(`${API} did not return JSON.`);
        }
        if (doc.error) throw new Error(`The daemon could not build the cluster view: ${doc.error}.`);
        const parsed = performance.now();
        if (doc.light) {
          state.lightSeen = true;
          again = 0; // the whole document at once
          if (!parseFilter(state.q, state.stateFilter).active && mode(doc) === "fleet") {
            renderLight(doc);
            notePerf(t0, parsed, false);
          }
        } else {
          state.lastText = text;
          state.doc = doc;
          render();
          notePerf(t0, parsed, true);
          changed = true;
        }
      }
      state.error = null;
      state.lastOkAt = Date.now();
    } catch (err) {
      state.error = err.name === "AbortError" ? (waited === TIMEOUT_MS ? `${API} did not answer within ${TIMEOUT_MS / 1000} s.` : `${API} did not finish its answer within ${BODY_TIMEOUT_MS / 1000} s.`) : err.message || String(err);
      if (err instanceof TypeError) state.error = `Cannot reach the swarmgpu daemon at ${location.host || "this address"}.`;
      if (light) state.lightSeen = true; // then the whole document, as before
    } finally {
      clearTimeout(kill);
      renderLive();
      if (!state.paused) timer = setTimeout(poll, again);
    }
    if (changed) fetchHistory();
  }

  function wire() {
    // delegated once: tiles, cells and <details> are patched in place, never re-bound
    const nodes = $("nodes");
    const focus = $("focus");
    const tileOf = (e) => e.target.closest?.(".gpu");
    const cellOf = (e) => e.target.closest?.(".cell[data-key]");
    for (const scope of [nodes, focus]) {
      scope.addEventListener("click", (e) => {
        const cell = cellOf(e);
        if (cell) return openNode(cell.closest(".fn").dataset.node, cell.dataset.key);
        const name = e.target.closest?.(".fn-name");
        if (name) return openNode(name.parentElement.dataset.node, null);
        if (e.target.closest?.("[data-action=close]")) return closeFocus();
        const on = e.target.closest?.("[data-open-node]");
        if (on) return openNode(on.dataset.openNode, `${on.dataset.openNode}/${on.dataset.gpu}`);
        if (tileOf(e)) select(tileOf(e).dataset.key);
      });
      scope.addEventListener("focusin", (e) => {
        if (tileOf(e)) select(tileOf(e).dataset.key);
        else if (cellOf(e)) labelCell(cellOf(e));
      });
      scope.addEventListener("keydown", (e) => {
        if (cellOf(e)) return fleetMove(e, cellOf(e).dataset.key);
        if (tileOf(e)) return tileKey(e, tileOf(e).dataset.key, scope);
        if (e.key === "Escape" && scope === focus) closeFocus();
      });
      scope.addEventListener(
        "toggle",
        (e) => {
          const key = e.target.dataset?.key;
          if (key) e.target.open ? state.openDetails.add(key) : state.openDetails.delete(key);
        },
        true, // toggle does not bubble
      );
    }
    nodes.addEventListener("mouseover", (e) => cellOf(e) && !cellOf(e).title && labelCell(cellOf(e)));
    document.querySelector(".side").addEventListener("click", (e) => {
      const link = e.target.closest?.("[data-service]");
      if (link) openService(link.dataset.service);
    });
    focus.addEventListener("click", (e) => {
      const link = e.target.closest?.("button[data-service]");
      if (link) openService(link.dataset.service);
    });
    $("pause").addEventListener("click", togglePause);
    let typing = null;
    const changed = () => {
      state.q = $("q").value.trim();
      state.stateFilter = $("state").value;
      state.view = $("view").value;
      state.color = $("color").value;
      writeUrl();
      render();
      fetchHistory();
    };
    $("q").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(changed, 200);
    });
    for (const id of ["state", "view", "color"]) $(id).addEventListener("change", changed);
    $("toolbar").addEventListener("submit", (e) => {
      e.preventDefault();
      changed();
    });
    $("clear").addEventListener("click", () => {
      $("q").value = "";
      $("state").value = "";
      changed();
    });
    window.addEventListener("popstate", () => {
      readUrl();
      render();
    });
  }

  window.swarmgpuMap = { state }; // for benchmarks/bench_map.py and the tests: read only

  document.addEventListener("DOMContentLoaded", () => {
    readUrl();
    wire();
    poll();
    setInterval(() => state.lastOkAt && renderLive(), 5000); // lets "Offline" appear even if fetch hangs
  });
})();
