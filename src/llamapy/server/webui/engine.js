// The engine view: draws each event of /engine/events (server/engine_view.py): the KV cells of
// every stream coloured by sequence with n_kv marked, the last steps' batches and their
// ubatches, the slots, and memory predicted beside RSS.
"use strict";

const $ = (id) => document.getElementById(id);
const SHARED = -2, EMPTY = -1;
const MAX_STEPS = 12;
const KIND = { g: "gen", d: "draft", p: "prompt" };

function seqColor(s) { return "hsl(" + ((s * 67 + 200) % 360) + " 70% 50%)"; }

function drawKV(kv) {
  const root = $("kv");
  root.replaceChildren();
  const totals = {};
  for (const st of kv.streams) {
    const row = el("div", { class: "stream" });
    row.append(el("div", { class: "stream-label muted",
      text: (kv.unified ? "unified stream" : "stream " + st.stream) + ": " + st.used + " / " + st.size + " cells used, n_kv " + st.n_kv }));
    const strip = el("div", { class: "strip", "data-stream": String(st.stream) });
    let at = 0;
    for (const [code, len] of st.runs) {
      const cls = code === EMPTY ? "run empty" : code === SHARED ? "run shared" : "run";
      const run = el("span", { class: cls, "data-seq": String(code), "data-len": String(len),
        title: (code === EMPTY ? "free" : code === SHARED ? "shared" : "seq " + code) + ": cells " + at + "–" + (at + len - 1) });
      run.style.width = (100 * len / st.size) + "%";
      run.style.left = (100 * at / st.size) + "%";
      if (code >= 0) run.style.background = seqColor(code);
      strip.append(run);
      at += len;
    }
    for (let p = kv.n_pad; p < st.size; p += kv.n_pad) {
      const tick = el("span", { class: "pad-tick" });
      tick.style.left = (100 * p / st.size) + "%";
      strip.append(tick);
    }
    const nkv = el("span", { class: "n-kv", title: "n_kv = " + st.n_kv });
    nkv.style.left = (100 * st.n_kv / st.size) + "%";
    strip.append(nkv);
    row.append(strip);
    root.append(row);
    st.cells_per_seq.forEach((n, s) => { totals[s] = (totals[s] || 0) + n; });
  }
  const legend = $("legend");
  legend.replaceChildren();
  for (const [s, n] of Object.entries(totals)) {
    if (!n) continue;
    const item = el("span", { class: "seq-count", "data-seq": s, "data-cells": String(n) });
    const sw = el("span", { class: "swatch" });
    sw.style.background = seqColor(Number(s));
    item.append(sw, document.createTextNode("seq " + s + ": " + n + " cells"));
    legend.append(item);
  }
}

function drawStep(b) {
  if (!b.n_tokens) return;
  const box = $("steps");
  const ids = b.slots.map((s) => s.id);
  const row = el("div", { class: "step", "data-step": String(b.step), "data-slots": ids.join(",") });
  const desc = b.slots.map((s) => "slot " + s.id + ": " + ["gen", "draft", "prompt"].filter((k) => s[k]).map((k) => s[k] + " " + k).join(" + ")).join("; ");
  const extra = b.draft_proposed ? " · draft " + b.draft_accepted + "/" + b.draft_proposed + " accepted" : "";
  row.append(el("div", { class: "step-label muted", text: "step " + b.step + ": " + b.n_tokens + " tokens in " + b.ubatches.length + " ubatch(es) [" + b.ubatches.join(", ") + "]" + extra + " — " + desc }));
  const cells = el("div", { class: "rows" });
  const cuts = new Set();
  let acc = 0;
  for (const n of b.ubatches.slice(0, -1)) { acc += n; cuts.add(acc); }
  b.rows.forEach(([slot, kind], i) => {
    if (cuts.has(i)) cells.append(el("span", { class: "ubatch-cut", title: "ubatch cut" }));
    const r = el("span", { class: "row " + KIND[kind], "data-slot": String(slot), title: "slot " + slot + " " + KIND[kind], text: kind });
    r.style.background = seqColor(slot);
    cells.append(r);
  });
  row.append(cells);
  box.prepend(row);
  while (box.children.length > MAX_STEPS) box.lastChild.remove();
}

function drawSlots(slots) {
  const tb = $("slots").querySelector("tbody");
  tb.replaceChildren();
  for (const s of slots) {
    const prog = el("progress", { max: "1", value: String(s.prompt_progress || 0) });
    const prompt = el("td", {}, prog, document.createTextNode(" " + s.n_prompt_tokens_processed + "/" + s.n_prompt_tokens));
    const id = el("td", {}, el("span", { class: "swatch" }), document.createTextNode(String(s.id)));
    id.firstChild.style.background = seqColor(s.id);
    tb.append(el("tr", { class: "slot " + s.state, "data-slot": String(s.id) }, id, el("td", { text: s.state }),
      el("td", { text: String(s.n_tokens_cached) }), prompt, el("td", { text: String(s.n_decoded) }),
      el("td", { text: s.tokens_per_s ? s.tokens_per_s.toFixed(1) : "" })));
  }
}

function drawMemory(m) {
  const root = $("memory");
  root.replaceChildren();
  const parts = [["weights", m.weights], ["KV", m.kv], ["compute", m.compute], ["output", m.output]];
  const total = parts.reduce((a, [, v]) => a + v, 0);
  const scale = Math.max(total, m.rss) || 1;
  const bar = el("div", { class: "membar" });
  parts.forEach(([name, v], i) => {
    const seg = el("span", { class: "seg seg" + i, title: name + " " + mib(v), text: v / scale > 0.08 ? name : "" });
    seg.style.width = (100 * v / scale) + "%";
    bar.append(seg);
  });
  const rss = el("div", { class: "membar" });
  const seg = el("span", { class: "seg rss", text: "RSS" });
  seg.style.width = (100 * m.rss / scale) + "%";
  rss.append(seg);
  root.append(el("div", { class: "muted", text: "predicted: " + parts.map(([n, v]) => n + " " + mib(v)).join(" + ") + " = " + mib(total) }), bar,
    el("div", { class: "muted", id: "rss", text: "process RSS: " + mib(m.rss) }), rss);
}

function draw(ev) {
  const c = ev.config;
  $("config").textContent = "n_ctx " + c.n_ctx + " · " + c.n_seq_max + " slots (" + (c.kv_unified ? "unified cache" : c.n_ctx_seq + " cells each") + ") · -b " + c.n_batch + " · -ub " + c.n_ubatch;
  $("status").textContent = "step " + ev.step + " · " + ev.metrics.kv_cells_used + " / " + ev.metrics.kv_cells_total + " cells used · " + ev.queue + " waiting";
  document.body.dataset.step = String(ev.step);
  drawKV(ev.kv);
  for (const b of ev.batches.slice(-MAX_STEPS)) drawStep(b);
  drawSlots(ev.slots);
  drawMemory(ev.memory);
}

async function run() {
  for (;;) {
    try {
      await withKey($("key-dialog"), async () => { for await (const ev of api.events("/engine/events")) draw(ev); });
      $("status").textContent = "stream ended; reconnecting…";
    } catch (e) {
      $("status").textContent = "engine events: " + e.message;
      if (/engine events/.test(e.message)) return;  // the server does not publish them (501)
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

run();
