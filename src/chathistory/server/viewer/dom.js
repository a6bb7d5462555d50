// DOM and text helpers shared by the viewer's modules.

import { collapseSpaces, el, plainText, truncate } from "./markdown.js";

export const KV = { 1: "loaded", 0: "marked", "-1": "unloaded" };
const KNOWN_ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

export const $ = (id) => document.getElementById(id);
export const enc = encodeURIComponent;

// a newer navigation makes older async work drop its results: work started for
// generation g is dropped when nav.generation !== g
export const nav = { generation: 0 };


export function h(tag, cls, ...children) {
  const node = el(tag, cls);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

export function anchor(href, cls, ...children) {
  const a = h("a", cls, ...children);
  a.href = href;
  return a;
}

export function button(label, cls, onClick) {
  const b = h("button", cls, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

export function ago(iso) {
  if (!iso) return "";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return "just now";
  const units = [["y", 31536000], ["mo", 2592000], ["d", 86400], ["h", 3600], ["min", 60]];
  for (const [name, size] of units) if (seconds >= size) return `${Math.floor(seconds / size)} ${name} ago`;
  return "";
}

export function when(iso) {
  const span = h("time", "when", ago(iso));
  if (iso) {
    span.dateTime = iso;
    span.title = new Date(iso).toLocaleString();
  }
  return span;
}

export function plural(n, word) {
  return `${fmt(n)} ${word}${n === 1 ? "" : "s"}`;
}

export function fmt(n) {
  return Number(n || 0).toLocaleString("en-US");
}

export function bytes(n) {
  if (!Number.isFinite(n)) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function roleClass(role) {
  return KNOWN_ROLES.has(role) ? `role-${role}` : "role-custom";
}

export function tokensOf(message) {
  const counts = message.token_counts || {};
  const names = Object.keys(counts);
  return names.length ? { n: counts[names[0]], counter: names[0] } : null;
}

export const TITLE_LIMIT = 120; // chathistory.titles.TITLE_LIMIT
const TITLE_KEYS = ["title", "name", "subject"]; // chathistory.titles.TITLE_KEYS

export function textOf(message, limit = 200) {
  // a message as one line of plain text: its text with the Markdown stripped
  // (the rule of chathistory.titles), then a label per file or image
  const texts = [];
  const labels = [];
  for (const part of message.parts || []) {
    if (part.type === "text") texts.push(part.text);
    else if (part.type === "file" || part.type === "image") labels.push(mediaLabel(part));
  }
  const text = [plainText(texts.join("\n"), limit), ...labels].filter(Boolean).join(" ");
  return truncate(text, limit);
}

// What a file or an image is called in one line of text, as the library's
// text-only copy (History.recent_text, history.py _file_line) calls it:
// "File: name" for a file or any stored attachment; an image without a name
// by where it is: "Image: <url>", "Image (inline)" for a data: URL, "Image
// (not included)" for a ChatGPT export's file-service:// or sediment://
// pointer (the export did not copy the file).
export function mediaLabel(part) {
  if (part.type !== "image" || part.attachment) return `File: ${fileName(part)}`;
  const url = String(part.url || "");
  if (url.startsWith("data:")) return "Image (inline)";
  if (url.startsWith("file-service://") || url.startsWith("sediment://")) return "Image (not included)";
  return `Image: ${url}`;
}

export function fileName(part) {
  return part.name || part.attachment?.name || (part.url && !part.url.startsWith("data:") ? part.url : "") || part.type;
}

export function titleOf(session) {
  // the rule of chathistory.titles.session_title: a metadata title as plain
  // text, else the server's title (a list item's: the first user message with
  // its Markdown stripped); null when neither (the page then reads the first
  // user message itself, with textOf)
  const md = session.metadata || {};
  for (const key of TITLE_KEYS) {
    const value = typeof md[key] === "string" ? collapseSpaces(md[key]) : "";
    if (value) return truncate(value, TITLE_LIMIT);
  }
  return typeof session.title === "string" && session.title ? session.title : null;
}

export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function showError(target, err) {
  const box = h("div", "error", h("strong", null, "Could not load: "), err.message || String(err));
  if (err.path) box.append(h("div", "error-path", `at ${err.path}`));
  target.append(box);
}


export function fact(term, value) {
  return [h("dt", null, term), h("dd", null, value)];
}

export function details(label, cls, ...children) {
  return h("details", cls, h("summary", null, label), ...children);
}
