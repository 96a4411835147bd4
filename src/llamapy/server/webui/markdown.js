// Markdown to DOM nodes, safely: model text only ever reaches the page through textContent and
// text nodes, never parsed as HTML, so `<img src=x onerror=...>` in a reply shows as those characters.
// Handles fenced code blocks, headings, lists, paragraphs, inline `code`, **bold**, *italic*.
"use strict";

const INLINE = /(`[^`\n]+`|\*\*[^*\n]+\*\*|\*[^*\n]+\*)/;

function inline(parent, text) {
  for (const part of text.split(INLINE)) {
    if (!part) continue;
    if (part.length > 2 && part[0] === "`" && part.endsWith("`")) parent.append(el("code", { text: part.slice(1, -1) }));
    else if (part.length > 4 && part.startsWith("**") && part.endsWith("**")) parent.append(el("strong", { text: part.slice(2, -2) }));
    else if (part.length > 2 && part[0] === "*" && part.endsWith("*")) parent.append(el("em", { text: part.slice(1, -1) }));
    else parent.append(document.createTextNode(part));
  }
}

function renderMarkdown(text) {
  const root = el("div", { class: "md" });
  const lines = text.split("\n");
  let para = [], list = null;
  const flush = () => {
    if (para.length) {
      const p = el("p");
      para.forEach((l, i) => { if (i) p.append(el("br")); inline(p, l); });
      root.append(p);
      para = [];
    }
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w+-]*)/);
    if (fence) {
      flush();
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      const pre = el("pre", { class: "code" });
      if (fence[1]) pre.append(el("span", { class: "lang", text: fence[1] }));
      pre.append(el("code", { text: code.join("\n") }));
      root.append(pre);
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) { flush(); const n = el("h" + Math.min(6, h[1].length + 2)); inline(n, h[2]); root.append(n); continue; }
    const li = line.match(/^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/);
    if (li) {
      if (para.length) flush();
      const tag = li[1] ? "ol" : "ul";
      if (!list || list.tagName.toLowerCase() !== tag) { list = el(tag); root.append(list); }
      const item = el("li"); inline(item, li[2]); list.append(item);
      continue;
    }
    if (!line.trim()) { flush(); continue; }
    list = null;
    para.push(line);
  }
  flush();
  return root;
}
