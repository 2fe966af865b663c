// swarmgpu GPU map: polls /api/v1/cluster and redraws the map in place.
// Plain DOM building only: every value from the API goes in as text, never as HTML.
"use strict";

(() => {
  const API = "/api/v1/cluster";
  const POLL_MS = 2500;
  const TIMEOUT_MS = 4000;
  const STALE_AFTER_MS = 3 * POLL_MS + 1000;
  const KIND_ORDER = ["nvlink", "numa", "pcie"];
  const KIND_LABEL = { nvlink: "NVLink", numa: "NUMA", pcie: "PCIe" };

  const state = {
    doc: null, // last good document
    lastText: null, // its raw text: an unchanged poll redraws nothing
    lastOkAt: null, // Date.now() of the last good poll
    error: null, // why the last poll failed, or null
    selected: null, // data-key of the GPU shown in the inspector
    paused: false,
    openDetails: new Set(), // data-keys of <details> the user opened
  };

  // ---- tiny DOM helpers ----------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c)); // strings become text nodes
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
    for (const a of [...old.attributes]) if (!neu.hasAttribute(a.name)) old.removeAttribute(a.name);
    for (const a of [...neu.attributes]) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
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

  function gib(mib) {
    if (mib === null || mib === undefined) return "?";
    const g = mib / 1024;
    return g >= 10 ? `${Math.round(g)}` : g.toFixed(1).replace(/\.0$/, "");
  }

  function used(mib) {
    // a near-idle GPU reads "3 MiB", not a misleading "0 GiB"
    if (mib === null || mib === undefined) return "?";
    return mib < 1024 ? `${mib} MiB` : gib(mib);
  }

  const pct = (x) => (x === null || x === undefined ? "n/a" : `${Math.round(x)} %`);

  function ago(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  function clock(ts) {
    if (!ts) return "?";
    return new Date(ts * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  function list(xs) {
    // 0,1,2,3 -> "0–3"; 0,2 -> "0, 2"
    const s = [...xs].sort((a, b) => a - b);
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
    for (const ch of String(name)) x = (x * 31 + ch.codePointAt(0)) >>> 0;
    return x % 360;
  }

  function svcChip(name, extra) {
    const el = h("span", { class: "svc" }, name, extra ? h("span", { class: "share" }, extra) : null);
    el.style.setProperty("--hue", hue(name));
    return el;
  }

  const shortId = (id) => (id ? String(id).slice(0, 10) : "?");

  function share(milli) {
    if (milli === null || milli === undefined || milli >= 1000) return null;
    return `${Math.round(milli / 10)} %`;
  }

  // ---- status words (text + icon, never colour alone) ---------------------

  const LABELS_STATE = {
    "in-sync": ["ok", "✓", "Labels in sync"],
    drifted: ["warn", "!", "Labels drifted"],
    "agent-stale": ["bad", "✕", "Agent stale"],
    "no-agent": ["muted", "–", "No agent"],
  };

  function badge(kind, icon, text, title) {
    return h("span", { class: `badge ${kind}`, title }, h("span", { class: "icon", "aria-hidden": "true" }, icon), text);
  }

  function nodeBadge(node) {
    const ok = node.state === "ready" && node.availability === "active";
    return badge(ok ? "ok" : "warn", ok ? "●" : "!", `${node.state || "?"} · ${node.availability || "?"}`);
  }

  function labelsBadge(node, now) {
    const [kind, icon, text] = LABELS_STATE[node.labels_state] || ["muted", "?", `Labels ${node.labels_state}`];
    const drift = node.drift || [];
    const agent = node.agent || {};
    let extra = "";
    if (node.labels_state === "drifted" && drift.length) extra = ` (${drift.length})`;
    if (node.labels_state === "agent-stale" && agent.last_ok) extra = ` · last ok ${ago(now - agent.last_ok)}`;
    return badge(kind, icon, text + extra);
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
    const frac = value === null || value === undefined || !max ? null : Math.min(1, Math.max(0, value / max));
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
    if (!gpu.healthy) parts.push(`unhealthy${gpu.error ? ": " + gpu.error : ""}`);
    parts.push(
      gpu.memory_used_mib === null || gpu.memory_used_mib === undefined
        ? `${gib(gpu.memory_mib)} GiB, usage unknown`
        : `${gib(gpu.memory_used_mib)} of ${gib(gpu.memory_mib)} GiB used`,
    );
    parts.push(`utilisation ${pct(gpu.util_pct)}`);
    if ((gpu.mig || []).length) {
      parts.push(`MIG: ${gpu.mig.map((m) => `${m.profile} ${m.holder ? "held by " + m.holder.service : "free"}`).join(", ")}`);
    }
    const hs = gpu.holders || [];
    if (hs.length) parts.push(`held by ${hs.map((x) => x.service + (share(x.share_milli) ? ` (${share(x.share_milli)})` : "")).join(", ")}`);
    else if (!(gpu.mig || []).length) parts.push("free");
    return parts.join("; ");
  }

  function gpuTile(node, gpu) {
    const key = gpuKey(node, gpu);
    const mig = (gpu.mig || []).length > 0;
    const holders = gpu.holders || [];
    const cls = ["gpu", gpuHeld(gpu) ? "held" : "free", gpu.healthy === false ? "sick" : "", mig ? "has-mig" : ""];
    if (key === state.selected) cls.push("selected");
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
      meter(
        "Mem",
        gpu.memory_used_mib,
        gpu.memory_mib,
        gpu.memory_used_mib === null || gpu.memory_used_mib === undefined ? `? / ${gib(gpu.memory_mib)} GiB` : `${used(gpu.memory_used_mib)} / ${gib(gpu.memory_mib)} GiB`,
        "mem",
      ),
      meter("Util", gpu.util_pct, 100, pct(gpu.util_pct), "util"),
      mig ? migStack(gpu) : null,
      h(
        "div",
        { class: "holders" },
        holders.length
          ? holders.map((x) =>
              h("div", { class: "holder" }, svcChip(x.service, share(x.share_milli)), x.over_share ? badge("bad", "!", "over share", `uses ${x.memory_used_mib} MiB, share ${x.memory_share_mib} MiB`) : null, x.request ? h("span", { class: "req", title: x.request }, x.request) : null),
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

  function driftDetails(node) {
    const drift = node.drift || [];
    const agent = node.agent || {};
    const lines = [...drift];
    if (agent.error) lines.unshift(`agent: ${agent.error}`);
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
    return h("span", { class: `chip ${g.kind}` }, groupName(g), ` · GPU ${list(g.gpus)}`);
  }

  function nodeCard(node, now) {
    const gpus = node.gpus || [];
    const used = gpus.filter(gpuHeld).length;
    const lay = layoutGroups(node);
    const facts = [];
    if (node.product) facts.push(`${node.gpu_count ?? gpus.length} × ${node.product}`);
    if (node.driver_version) facts.push(`driver ${node.driver_version}`);
    if (node.cuda_driver_version) facts.push(`CUDA ${node.cuda_driver_version}`);
    const titleId = `node-${node.id || node.hostname}`;
    return h(
      "article",
      { class: `node${gpus.length ? "" : " no-gpu"} ls-${node.labels_state}`, "aria-labelledby": titleId, "data-node": node.hostname },
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
        node.addr ? h("span", { class: "addr" }, ` · ${node.addr}`) : null,
      ),
      driftDetails(node),
      lay.others.length ? h("p", { class: "chips", "aria-label": "Other GPU groups" }, lay.others.map(groupChip)) : null,
      gpus.length
        ? h(
            "div",
            { class: "groups" },
            lay.boxes.map((b) =>
              h(
                "section",
                { class: `group ${b.group ? b.group.kind : "none"}`, "aria-label": b.group ? `${b.group.name}, GPUs ${list(b.group.gpus)}` : b.label || "GPUs" },
                b.group || b.label
                  ? h("h3", { class: "group-label" }, b.group ? groupName(b.group) : b.label)
                  : null,
                h("div", { class: "tiles" }, b.gpus.map((g) => gpuTile(node, g))),
              ),
            ),
          )
        : null,
      linkMatrix(node),
    );
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
        ["Memory", gpu.memory_used_mib === null || gpu.memory_used_mib === undefined ? `${gib(gpu.memory_mib)} GiB (usage unknown)` : `${gib(gpu.memory_used_mib)} of ${gib(gpu.memory_mib)} GiB used`],
        ["Utilisation", pct(gpu.util_pct)],
        ["NUMA node", gpu.numa_node === null || gpu.numa_node === undefined ? "unknown" : String(gpu.numa_node)],
        ["Groups", groups.length ? groups.map((g) => `${g.name} (${KIND_LABEL[g.kind] || g.kind})`).join(", ") : "none"],
        ["Health", gpu.healthy === false ? `✕ unhealthy${gpu.error ? ": " + gpu.error : ""}` : "✓ healthy"],
      ]),
      h("h3", {}, "Held by"),
      holders.length
        ? h(
            "ul",
            { class: "held-list" },
            holders.map((x) =>
              h(
                "li",
                {},
                svcChip(x.service, share(x.share_milli)),
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
                h("li", {}, h("b", {}, m.profile), ` · ${gib(m.memory_mib)} GiB · `, m.holder ? [svcChip(m.holder.service), " task ", h("code", { title: m.holder.task }, shortId(m.holder.task))] : "free"),
              ),
            ),
          ]
        : null,
    );
  }

  function renderPending(doc) {
    const items = doc.pending || [];
    replace(
      $("pending"),
      h("h2", { id: "pending-h" }, "Pending requests ", h("span", { class: "count" }, String(items.length))),
      items.length
        ? h(
            "ul",
            { class: "items" },
            items.map((p) =>
              h("li", { class: "pending-item" }, h("div", {}, badge("warn", "◔", "pending"), " ", svcChip(p.service)), h("div", { class: "req" }, p.request), h("div", { class: "reason" }, h("b", {}, "Why: "), p.reason || "no reason given")),
            ),
          )
        : h("p", { class: "muted" }, "None: every GPU request is placed."),
    );
  }

  function renderMoves(doc, now) {
    const moves = doc.moves || {};
    const proposed = moves.proposed || [];
    const recent = moves.recent || [];
    const route = (m) => h("div", { class: "route" }, svcChip(m.service), " ", m.from, " → ", m.to, m.gpus && m.gpus.length ? ` (GPU ${list(m.gpus)})` : "");
    replace(
      $("moves"),
      h("h2", { id: "moves-h" }, "Rebalancing"),
      h("h3", {}, "Proposed ", h("span", { class: "count" }, String(proposed.length))),
      proposed.length
        ? h(
            "ul",
            { class: "items" },
            proposed.map((m) =>
              h(
                "li",
                {},
                route(m),
                h("div", { class: "meta" }, [m.trigger, m.window ? `over ${m.window}` : null].filter(Boolean).join(" · ")),
                m.reason ? h("div", { class: "reason" }, h("b", {}, "Why: "), m.reason) : null,
                m.gain ? h("div", { class: "gain" }, h("b", {}, "Gain: "), m.gain) : null,
              ),
            ),
          )
        : h("p", { class: "muted" }, "No moves proposed."),
      h("h3", {}, "Recent ", h("span", { class: "count" }, String(recent.length))),
      recent.length
        ? h(
            "ul",
            { class: "items" },
            recent.map((m) =>
              h(
                "li",
                {},
                h(
                  "div",
                  { class: "meta" },
                  h("time", { datetime: new Date(m.at * 1000).toISOString() }, clock(m.at)),
                  ` (${ago(now - m.at)}) `,
                  m.outcome === "done" ? badge("ok", "✓", "done") : m.outcome === "rolled-back" ? badge("warn", "↶", "rolled back") : badge("muted", "?", m.outcome || "unknown"),
                ),
                route(m),
                m.reason ? h("div", { class: "reason" }, m.reason) : null,
              ),
            ),
          )
        : h("p", { class: "muted" }, "No recent moves."),
    );
  }

  const SERVICE_STATUS = { placed: ["ok", "✓"], pending: ["warn", "◔"], invalid: ["bad", "✕"] };

  function renderServices(doc) {
    const svcs = doc.services || [];
    replace(
      $("services"),
      h("h2", { id: "services-h" }, "Services ", h("span", { class: "count" }, String(svcs.length))),
      svcs.length
        ? h(
            "ul",
            { class: "items" },
            svcs.map((s) => {
              const [k, icon] = SERVICE_STATUS[s.status] || ["muted", "?"];
              return h(
                "li",
                {},
                h("div", {}, svcChip(s.name), " ", badge(k, icon, s.status), s.state ? h("span", { class: "meta" }, ` ${s.state}`) : null),
                h("div", { class: "req" }, s.request),
                (s.placements || []).map((p) => h("div", { class: "meta" }, `${p.node}: GPU ${list(p.gpus || [])}`)),
                s.reason ? h("div", { class: "reason" }, s.reason) : null,
              );
            }),
          )
        : h("p", { class: "muted" }, "No GPU services."),
    );
  }

  function renderSummary(doc) {
    const nodes = doc.nodes || [];
    const gpus = nodes.flatMap((n) => n.gpus || []);
    const used = gpus.filter(gpuHeld).length;
    const drifted = nodes.filter((n) => n.labels_state === "drifted" || n.labels_state === "agent-stale").length;
    const item = (k, v, warn) => h("div", { class: warn ? "warn" : "" }, h("dt", {}, k), h("dd", {}, v));
    replace(
      $("summary"),
      item("Nodes", String(nodes.length)),
      item("GPUs in use", `${used} / ${gpus.length}`),
      item("Pending", String((doc.pending || []).length), (doc.pending || []).length > 0),
      item("Label issues", String(drifted), drifted > 0),
      doc.leader === false ? item("Role", "follower") : null,
    );
  }

  function renderNodes(doc, now) {
    // GPU nodes first, then by name ("node-2" before "node-10"), so cards keep their place
    const nodes = [...(doc.nodes || [])].sort(
      (a, b) => Number(!(a.gpus || []).length) - Number(!(b.gpus || []).length) || String(a.hostname).localeCompare(String(b.hostname), undefined, { numeric: true }),
    );
    const active = document.activeElement?.dataset?.key;
    const fresh = $("nodes").cloneNode(false);
    fresh.append(...(nodes.length ? nodes.map((n) => nodeCard(n, now)) : [h("p", { class: "empty" }, "No nodes in this swarm.")]));
    morph($("nodes"), fresh);
    // morph keeps the focused tile in place; refocus only if it had to be rebuilt
    if (active && document.activeElement?.dataset?.key !== active) {
      document.querySelector(`[data-key="${CSS.escape(active)}"]`)?.focus({ preventScroll: true });
    }
  }

  function render() {
    const doc = state.doc;
    if (!doc) return;
    const now = doc.generated_at || Date.now() / 1000; // judge ages by the daemon's clock
    state.rendering = true;
    renderSummary(doc);
    renderNodes(doc, now);
    renderPending(doc);
    renderMoves(doc, now);
    renderServices(doc);
    renderInspector();
    state.rendering = false;
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
    renderInspector();
  }

  function tileKey(e, key) {
    const tiles = [...document.querySelectorAll(".gpu")];
    const i = tiles.findIndex((t) => t.dataset.key === key);
    let next = null;
    if (e.key === "ArrowRight" || e.key === "ArrowDown") next = tiles[i + 1];
    else if (e.key === "ArrowLeft" || e.key === "ArrowUp") next = tiles[i - 1];
    else if (e.key === "Enter" || e.key === " ") {
      select(key);
      $("inspector").scrollIntoView({ block: "nearest" });
    } else if (e.key === "Escape") {
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
    const msg = state.error
      ? (state.doc ? "Offline: the map is stale. " : "Cannot load the cluster. ") +
        state.error +
        (state.doc ? ` Showing data from ${new Date(state.lastOkAt).toLocaleTimeString([], { hour12: false })}.` : "") +
        ` Retrying every ${POLL_MS / 1000} s.`
      : "";
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

  let timer = null;

  async function poll() {
    clearTimeout(timer);
    const ctl = new AbortController();
    const kill = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const resp = await fetch(API, { cache: "no-store", signal: ctl.signal, headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(`${API} answered HTTP ${resp.status}.`);
      const text = await resp.text();
      let doc;
      try {
        doc = JSON.parse(text);
      } catch {
        throw new Error(`${API} did not return JSON.`);
      }
      if (doc.error) throw new Error(`The daemon could not build the cluster view: ${doc.error}.`);
      state.error = null;
      state.lastOkAt = Date.now();
      if (text !== state.lastText) {
        state.lastText = text;
        state.doc = doc;
        render();
      }
    } catch (err) {
      state.error = err.name === "AbortError" ? `${API} did not answer within ${TIMEOUT_MS / 1000} s.` : err.message || String(err);
      if (err instanceof TypeError) state.error = `Cannot reach the swarmgpu daemon at ${location.host || "this address"}.`;
    } finally {
      clearTimeout(kill);
      renderLive();
      if (!state.paused) timer = setTimeout(poll, POLL_MS);
    }
  }

  function wire() {
    // delegated once: tiles and <details> are patched in place, never re-bound
    const nodes = $("nodes");
    const tileOf = (e) => e.target.closest?.(".gpu");
    nodes.addEventListener("click", (e) => tileOf(e) && select(tileOf(e).dataset.key));
    nodes.addEventListener("focusin", (e) => tileOf(e) && select(tileOf(e).dataset.key));
    nodes.addEventListener("keydown", (e) => tileOf(e) && tileKey(e, tileOf(e).dataset.key));
    nodes.addEventListener(
      "toggle",
      (e) => {
        const key = e.target.dataset?.key;
        if (key) e.target.open ? state.openDetails.add(key) : state.openDetails.delete(key);
      },
      true, // toggle does not bubble
    );
    $("pause").addEventListener("click", togglePause);
  }

  document.addEventListener("DOMContentLoaded", () => {
    wire();
    poll();
    setInterval(() => state.lastOkAt && renderLive(), 5000); // lets "Offline" appear even if fetch hangs
  });
})();
