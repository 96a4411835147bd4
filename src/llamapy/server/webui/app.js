// The chat page: conversations in localStorage, replies streamed from /v1/chat/completions,
// a stop button (AbortController), sampling settings, JSON-schema mode, reasoning folded.
"use strict";

const STORE = "llamapy.conversations";
const SETTINGS_STORE = "llamapy.settings";
const $ = (id) => document.getElementById(id);
const NUM_FIELDS = ["temperature", "top_k", "top_p", "min_p", "max_tokens", "seed"];

const chat = {
  convs: JSON.parse(localStorage.getItem(STORE) || "[]"),
  current: null,
  controller: null,
};

function save() { localStorage.setItem(STORE, JSON.stringify(chat.convs)); }

function saveSettings() {
  const s = { system: $("system").value, json_mode: $("json_mode").checked, json_schema: $("json_schema").value };
  for (const f of NUM_FIELDS) s[f] = $(f).value;
  localStorage.setItem(SETTINGS_STORE, JSON.stringify(s));
}

function loadSettings() {
  const s = JSON.parse(localStorage.getItem(SETTINGS_STORE) || "{}");
  if (s.system !== undefined) $("system").value = s.system;
  for (const f of NUM_FIELDS) if (s[f] !== undefined) $(f).value = s[f];
  $("json_mode").checked = !!s.json_mode;
  $("json_schema").value = s.json_schema || "";
  $("json_schema").hidden = !s.json_mode;
}

function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "new chat", messages: [] };
  chat.convs.unshift(c);
  chat.current = c;
  save();
  renderList();
  renderThread();
}

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of chat.convs) {
    const li = el("li", { class: c === chat.current ? "current" : "", "data-id": c.id });
    const open = el("button", { type: "button", class: "open", text: c.title });
    open.onclick = () => { chat.current = c; renderList(); renderThread(); };
    const del = el("button", { type: "button", class: "del", title: "delete", text: "×" });
    del.onclick = () => {
      chat.convs = chat.convs.filter((x) => x !== c);
      if (chat.current === c) chat.current = chat.convs[0] || null;
      save(); renderList(); renderThread();
    };
    li.append(open, del);
    ul.append(li);
  }
}

// Splits <think>...</think> off the content when the model writes its reasoning inline.
function splitThink(m) {
  let reasoning = m.reasoning || "", content = m.content || "";
  const t = content.match(/^\s*<think>([\s\S]*?)(<\/think>|$)([\s\S]*)$/);
  if (t) { reasoning += t[1]; content = t[3]; }
  return { reasoning, content };
}

function messageNode(m) {
  const box = el("div", { class: "msg " + m.role });
  box.append(el("div", { class: "role", text: m.role }));
  if (m.role === "assistant") {
    const { reasoning, content } = splitThink(m);
    if (reasoning) {
      const d = el("details", { class: "reasoning" }, el("summary", { text: "reasoning" }));
      d.append(el("div", { class: "reasoning-text", text: reasoning }));
      box.append(d);
    }
    box.append(renderMarkdown(content));
    if (m.stats) box.append(el("div", { class: "stats muted", text: m.stats }));
  } else {
    box.append(el("div", { class: "plain", text: m.content }));
  }
  return box;
}

function renderThread() {
  const box = $("messages");
  box.replaceChildren();
  if (!chat.current) return;
  for (const m of chat.current.messages) box.append(messageNode(m));
  box.scrollTop = box.scrollHeight;
}

function updateLast(m) {
  const box = $("messages");
  if (box.lastChild) box.lastChild.replaceWith(messageNode(m));
  box.scrollTop = box.scrollHeight;
}

function requestBody(conv) {
  const msgs = [];
  const sys = $("system").value.trim();
  if (sys) msgs.push({ role: "system", content: sys });
  for (const m of conv.messages) if (m.content && m.role !== "error") msgs.push({ role: m.role, content: m.content });
  const body = { messages: msgs, stream: true };
  for (const f of NUM_FIELDS) {
    const v = $(f).value;
    if (v !== "") body[f] = Number(v);
  }
  if (body.max_tokens !== undefined && body.max_tokens < 0) delete body.max_tokens;
  if ($("json_mode").checked) {
    const text = $("json_schema").value.trim();
    body.response_format = text ? { type: "json_schema", json_schema: { name: "schema", schema: JSON.parse(text) } }
                                : { type: "json_object" };
  }
  return body;
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
}

async function send(text) {
  if (!chat.current) newConversation();
  const conv = chat.current;
  $("error").hidden = true;
  let body;
  conv.messages.push({ role: "user", content: text });
  try { body = requestBody(conv); } catch (e) { showError("JSON schema: " + e.message); conv.messages.pop(); return; }
  if (conv.title === "new chat") conv.title = text.slice(0, 40);
  const reply = { role: "assistant", content: "", reasoning: "" };
  conv.messages.push(reply);
  save(); renderList(); renderThread();
  chat.controller = new AbortController();
  busy(true);
  try {
    await withKey($("key-dialog"), async () => {
      for await (const ev of api.events("/v1/chat/completions", {
        method: "POST", body: JSON.stringify(body), signal: chat.controller.signal,
        headers: { "Content-Type": "application/json" },
      })) {
        if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
        const d = ev.choices && ev.choices[0] && ev.choices[0].delta;
        if (d && d.content) reply.content += d.content;
        if (d && d.reasoning_content) reply.reasoning += d.reasoning_content;
        if (ev.timings) reply.stats = ev.timings.predicted_n + " tokens, " + ev.timings.predicted_per_second.toFixed(1) + " tokens/s";
        updateLast(reply);
      }
    });
  } catch (e) {
    if (e.name === "AbortError") reply.stats = "stopped";
    else showError(e.message);
    updateLast(reply);
  } finally {
    chat.controller = null;
    busy(false);
    save();
  }
}

function showError(msg) { $("error").textContent = msg; $("error").hidden = false; }

async function loadProps() {
  try {
    const p = await withKey($("key-dialog"), () => api.get("/props"));
    $("model").textContent = p.model_alias + " · n_ctx " + p.n_ctx + " (" + p.n_ctx_seq + " per slot) · " + p.total_slots + " slots";
    const g = p.default_generation_settings.params;
    const settings = JSON.parse(localStorage.getItem(SETTINGS_STORE) || "{}");
    for (const f of ["temperature", "top_k", "top_p", "min_p", "seed"]) if (settings[f] === undefined && g[f] !== undefined) $(f).value = g[f];
  } catch (e) { $("model").textContent = "server: " + e.message; }
}

function init() {
  loadSettings();
  chat.current = chat.convs[0] || null;
  renderList(); renderThread();
  $("new-chat").onclick = newConversation;
  $("stop").onclick = () => { if (chat.controller) chat.controller.abort(); };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || chat.controller) return;
    $("input").value = "";
    send(text);
  };
  $("input").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); } };
  $("json_mode").onchange = () => { $("json_schema").hidden = !$("json_mode").checked; saveSettings(); };
  for (const id of ["system", "json_schema", ...NUM_FIELDS]) $(id).onchange = saveSettings;
  loadProps();
}

init();
