// Calls to the llamapy server from the pages: the API key (kept in localStorage, asked for on a
// 401) sent as `Authorization: Bearer`, JSON GETs, and server-sent events read from fetch()
// (EventSource cannot send a header).
"use strict";

const KEY_STORE = "llamapy.apiKey";

class AuthError extends Error {}

const api = {
  key() { return localStorage.getItem(KEY_STORE) || ""; },
  setKey(k) { if (k) localStorage.setItem(KEY_STORE, k); else localStorage.removeItem(KEY_STORE); },
  headers(extra) {
    const h = Object.assign({}, extra || {});
    const k = api.key();
    if (k) h["Authorization"] = "Bearer " + k;
    return h;
  },
  async check(r) {
    if (r.status === 401) throw new AuthError("the server wants an API key");
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { const j = await r.json(); if (j.error && j.error.message) msg = j.error.message; } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    return r;
  },
  async get(path) {
    const r = await api.check(await fetch(path, { headers: api.headers() }));
    return r.json();
  },
  // Yields each event's parsed JSON; ends at `data: [DONE]` or when the stream ends.
  async *events(path, init) {
    const r = await api.check(await fetch(path, Object.assign({}, init, { headers: api.headers((init || {}).headers) })));
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") return;
          yield JSON.parse(data);
        }
      }
    }
  },
};

// A key dialog: shows `form`, resolves when the user submits a key.
function askKey(dialog) {
  return new Promise((resolve) => {
    dialog.hidden = false;
    const input = dialog.querySelector("input");
    input.focus();
    dialog.querySelector("form").onsubmit = (e) => {
      e.preventDefault();
      api.setKey(input.value.trim());
      dialog.hidden = true;
      resolve();
    };
  });
}

// Runs fn(); on an AuthError asks for the key and tries again.
async function withKey(dialog, fn) {
  for (;;) {
    try { return await fn(); } catch (e) {
      if (!(e instanceof AuthError)) throw e;
      await askKey(dialog);
    }
  }
}

function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") n.className = v; else if (k === "text") n.textContent = v; else n.setAttribute(k, v);
  }
  for (const c of kids) n.append(c);
  return n;
}

function mib(b) { return (b / 1048576).toFixed(1) + " MiB"; }
