// The chathistory viewer: a session list and a session's timeline, context
// window and branches, read through the v1 API with the user's API key.
//
// Everything from the server is put on the page with text nodes or element
// properties (never innerHTML), and message text goes through markdown.js,
// which builds DOM nodes itself: no content of a message can run script.

import { codeBlock, el, preformatted, renderMarkdown, safeUrl } from "./markdown.js";

const PAGE = 200; // messages fetched per request on a session page
const LIST_PAGE = 50;
const KEY_NAME = "chathistory.key";
const WINDOW_KEY = "chathistory.window";
const SUMMARY_KEY = "chathistory";
const KV = { 1: "loaded", 0: "marked", "-1": "unloaded" };
const KNOWN_ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

// ------------------------------------------------------------------ API

let apiKey = sessionStorage.getItem(KEY_NAME) || localStorage.getItem(KEY_NAME) || "";

class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

function authHeaders() {
  return apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
}

async function request(path) {
  let res;
  try {
    res = await fetch(path, { headers: authHeaders(), credentials: "omit", cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, `the server did not answer (${err.message})`);
  }
  if (res.ok) return res;
  let message = `${res.status} ${res.statusText}`;
  let field;
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      field = body.error.path;
    }
  } catch { /* not JSON */ }
  if (res.status === 401 || res.status === 403) askForKey(message);
  throw new ApiError(res.status, message, field);
}

async function api(path) {
  return (await request(path)).json();
}

const blobUrls = new Map();

async function assetUrl(attachment) {
  if (attachment.data) { // inline bytes (base64) that were never moved to the asset store
    return `data:${attachment.mime_type || "application/octet-stream"};base64,${attachment.data}`;
  }
  const sha = String(attachment.sha256 || "");
  if (!/^[0-9a-f]{64}$/.test(sha)) throw new ApiError(0, "attachment without a content hash");
  if (!blobUrls.has(sha)) {
    blobUrls.set(sha, request(`/v1/assets/${sha}`)
      .then((res) => res.blob())
      .then((blob) => URL.createObjectURL(blob)));
  }
  return blobUrls.get(sha);
}

// ------------------------------------------------------------------ key dialog

function askForKey(reason) {
  const dialog = $("key-dialog");
  $("key-reason").textContent = reason || "Paste an API key (chathistory keys create TENANT).";
  $("key-input").value = "";
  if (!dialog.open) dialog.showModal();
  $("key-input").focus();
}

function setupKeyDialog() {
  $("key-button").addEventListener("click", () => askForKey("Paste an API key for this server."));
  $("key-form").addEventListener("submit", () => {
    apiKey = $("key-input").value.trim();
    sessionStorage.removeItem(KEY_NAME);
    localStorage.removeItem(KEY_NAME);
    if (apiKey) ($("key-remember").checked ? localStorage : sessionStorage).setItem(KEY_NAME, apiKey);
    blobUrls.clear();
    start();
  });
  $("key-clear").addEventListener("click", () => {
    apiKey = "";
    sessionStorage.removeItem(KEY_NAME);
    localStorage.removeItem(KEY_NAME);
    $("key-dialog").close();
    start();
  });
  $("lightbox").addEventListener("click", () => { $("lightbox").hidden = true; });
}

// ------------------------------------------------------------------ helpers

function h(tag, cls, ...children) {
  const node = el(tag, cls);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

function anchor(href, cls, ...children) {
  const a = h("a", cls, ...children);
  a.href = href;
  return a;
}

function button(label, cls, onClick) {
  const b = h("button", cls, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function ago(iso) {
  if (!iso) return "";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return "just now";
  const units = [["y", 31536000], ["mo", 2592000], ["d", 86400], ["h", 3600], ["min", 60]];
  for (const [name, size] of units) if (seconds >= size) return `${Math.floor(seconds / size)} ${name} ago`;
  return "";
}

function when(iso) {
  const span = h("time", "when", ago(iso));
  if (iso) {
    span.dateTime = iso;
    span.title = new Date(iso).toLocaleString();
  }
  return span;
}

function plural(n, word) {
  return `${fmt(n)} ${word}${n === 1 ? "" : "s"}`;
}

function fmt(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function bytes(n) {
  if (!Number.isFinite(n)) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

function roleClass(role) {
  return KNOWN_ROLES.has(role) ? `role-${role}` : "role-custom";
}

function tokensOf(message) {
  const counts = message.token_counts || {};
  const names = Object.keys(counts);
  return names.length ? { n: counts[names[0]], counter: names[0] } : null;
}

function textOf(message, limit = 200) {
  const texts = [];
  for (const part of message.parts || []) {
    if (part.type === "text") texts.push(part.text);
    else if (part.type === "file" || part.type === "image") texts.push(`File: ${fileName(part)}`);
  }
  const text = texts.join(" ").replace(/\s+/g, " ").trim();
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

function fileName(part) {
  return part.name || part.attachment?.name || (part.url && !part.url.startsWith("data:") ? part.url : "") || part.type;
}

function titleOf(session) {
  const md = session.metadata || {};
  for (const key of ["title", "name", "subject"]) if (typeof md[key] === "string" && md[key].trim()) return md[key].trim();
  return null;
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function showError(target, err) {
  const box = h("div", "error", h("strong", null, "Could not load: "), err.message || String(err));
  if (err.path) box.append(h("div", "error-path", `at ${err.path}`));
  target.append(box);
}

// ------------------------------------------------------------------ router

let generation = 0; // a newer navigation makes older async work drop its results

function route() {
  const raw = location.hash.slice(1) || "/";
  const [path, query] = raw.split("?");
  const params = new URLSearchParams(query || "");
  generation++;
  const main = $("main");
  main.replaceChildren();
  if (path.startsWith("/s/")) {
    showSession(decodeURIComponent(path.slice(3)), params, main, generation);
  } else {
    showList(params, main, generation);
  }
}

async function start() {
  $("tenant").textContent = "";
  try {
    const me = await api("/v1/me");
    $("tenant").textContent = `tenant ${me.tenant}`;
    $("tenant").title = me.key_id ? `key ${me.key_id}` : "no key (loopback, open mode)";
  } catch {
    /* no tenant shown: a 401/403 has opened the key dialog; other errors show on the page */
  }
  route();
}

// ------------------------------------------------------------------ session list

function showList(params, main, gen) {
  const q = params.get("q") || "";
  const meta = params.get("meta") || "";
  const order = params.get("order") === "created" ? "created" : "recent";

  const form = h("form", "filters");
  form.setAttribute("role", "search");
  const qInput = h("input", "search");
  Object.assign(qInput, { type: "search", name: "q", value: q, placeholder: "Search messages, ids, metadata…" });
  qInput.setAttribute("aria-label", "Search");
  const metaInput = h("input", "meta-filter");
  Object.assign(metaInput, { type: "text", name: "meta", value: meta, placeholder: "filter: user=…, key=value, …" });
  metaInput.setAttribute("aria-label", "Metadata filter");
  const orderSelect = h("select", "order");
  orderSelect.setAttribute("aria-label", "Order");
  for (const [value, label] of [["recent", "Last activity"], ["created", "Created"]]) {
    const option = h("option", null, label);
    option.value = value;
    option.selected = value === order;
    orderSelect.append(option);
  }
  const submit = h("button", "primary", "Search");
  submit.type = "submit";
  form.append(qInput, metaInput, orderSelect, submit);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (qInput.value.trim()) next.set("q", qInput.value.trim());
    if (metaInput.value.trim()) next.set("meta", metaInput.value.trim());
    if (orderSelect.value !== "recent") next.set("order", orderSelect.value);
    const hash = `#/?${next}`;
    if (location.hash === hash) route(); else location.hash = hash;
  });
  orderSelect.addEventListener("change", () => form.requestSubmit());

  const list = h("ul", "sessions");
  const status = h("p", "list-status", "Loading…");
  const more = button("Load more", "more", () => loadPage());
  more.hidden = true;
  main.append(h("h1", "page-title", q ? `Sessions matching “${q}”` : "Sessions"), form, list, status, more);

  let cursor = null;
  let shown = 0;
  const previews = queue(4);

  async function loadPage() {
    more.disabled = true;
    const qs = new URLSearchParams({ limit: String(LIST_PAGE), order });
    if (q) qs.set("q", q);
    for (const pair of meta.split(",")) {
      const [key, ...rest] = pair.split("=");
      if (!key.trim() || !rest.length) continue;
      if (key.trim() === "user") qs.set("user", rest.join("=").trim()); // the session's user
      else qs.append(`metadata.${key.trim()}`, rest.join("=").trim());
    }
    if (cursor) qs.set("cursor", cursor);
    let page;
    try {
      page = await api(`/v1/sessions?${qs}`);
    } catch (err) {
      if (gen !== generation) return;
      status.textContent = "";
      showError(status, err);
      return;
    }
    if (gen !== generation) return;
    for (const session of page.items) {
      list.append(sessionRow(session, previews, gen));
      shown++;
    }
    cursor = page.next_cursor;
    more.hidden = !cursor;
    more.disabled = false;
    status.textContent = shown ? `${fmt(shown)} session${shown === 1 ? "" : "s"}${cursor ? " so far" : ""}`
      : (q || meta ? "No session matches." : "No sessions yet. Import some with: chathistory import FILE");
  }
  loadPage();
}

function queue(concurrency) {
  let running = 0;
  const waiting = [];
  const next = () => {
    if (running >= concurrency || !waiting.length) return;
    running++;
    const job = waiting.shift();
    job().finally(() => { running--; next(); });
  };
  return (job) => { waiting.push(job); next(); };
}

function sessionRow(session, previews, gen) {
  const title = titleOf(session);
  const titleNode = h("span", "session-title", title || session.id);
  if (!title) titleNode.classList.add("untitled");
  const preview = h("span", "session-preview");
  const meta = h("span", "session-meta",
    h("span", "count", plural(session.message_count, "message")),
    h("span", "count", `${fmt(session.token_count)} tokens`),
    session.user ? h("span", "user", `user ${session.user}`) : null,
    session.parent_id ? h("span", "branch-flag", `fork of ${session.parent_id}`) : null,
    when(session.updated_at));
  meta.prepend(h("span", "session-id", session.id));
  const link = anchor(`#/s/${enc(session.id)}`, "session-link", titleNode, preview, meta);
  const row = h("li", "session-row", link);
  row.dataset.sessionId = session.id;
  if (session.message_count > 0) {
    previews(async () => {
      if (gen !== generation) return;
      try {
        const { messages } = await api(`/v1/sessions/${enc(session.id)}/messages?start=0&stop=6&include_marked=true`);
        const first = messages.find((m) => m.role === "user") || messages.find((m) => textOf(m)) || null;
        if (!first) return;
        if (title) preview.textContent = textOf(first, 160);
        else titleNode.textContent = textOf(first, 120) || session.id; // untitled: its opening line
      } catch { /* a preview is optional */ }
    });
  }
  return row;
}

// ------------------------------------------------------------------ session page

async function showSession(id, params, main, gen) {
  let session;
  let lineage;
  try {
    [session, lineage] = await Promise.all([
      api(`/v1/sessions/${enc(id)}`),
      api(`/v1/sessions/${enc(id)}/lineage`).catch(() => []),
    ]);
  } catch (err) {
    if (gen !== generation) return;
    main.append(anchor("#/", "back", "← Sessions"));
    showError(main, err);
    return;
  }
  if (gen !== generation) return;
  const view = new SessionView(session, lineage, main, gen);
  await view.loadMore();
  const focus = params.get("m");
  if (focus) view.focus(focus);
}

class SessionView {
  constructor(session, lineage, main, gen) {
    this.session = session;
    this.gen = gen;
    this.next = 0; // the next page starts at this position
    this.shown = 0;
    this.done = session.message_count === 0;
    this.byId = new Map(); // message id -> {message, node, seq}
    this.calls = new Map(); // call id -> {details, result slot, status}
    this.window = windowLayout(session);

    const title = titleOf(session);
    const head = h("div", "session-head",
      anchor("#/", "back", "← Sessions"),
      this.heading = h("h1", "page-title", title || session.id),
      h("div", "session-facts",
        h("span", "session-id", session.id),
        h("span", null, plural(session.message_count, "message")),
        h("span", null, `${fmt(session.token_count)} tokens`),
        h("span", null, `version ${session.version}`),
        session.user ? h("span", null, `user ${session.user}`) : null,
        h("span", null, "updated ", when(session.updated_at))));

    this.timeline = h("ol", "timeline");
    this.timeline.setAttribute("aria-label", "Messages");
    this.moreButton = button("Load more", "more", () => this.loadMore());
    this.allButton = button("Load all", "more", () => this.loadAll());
    this.status = h("p", "list-status");
    const tools = h("div", "timeline-tools");
    if (this.window) {
      const toggle = h("label", "only-window");
      const box = h("input");
      box.type = "checkbox";
      box.addEventListener("change", () => this.timeline.classList.toggle("window-only", box.checked));
      toggle.append(box, " only what the model sees");
      tools.append(toggle);
    }
    const expand = h("label", "expand-all");
    const expandBox = h("input");
    expandBox.type = "checkbox";
    expandBox.addEventListener("change", () => {
      for (const d of this.timeline.querySelectorAll("details.tool-call, details.reasoning")) d.open = expandBox.checked;
    });
    expand.append(expandBox, " expand tools and reasoning");
    tools.append(expand);

    const side = h("aside", "side",
      this.windowPanel(),
      branchPanel(session, lineage),
      infoPanel(session));
    const body = h("section", "conversation", tools, this.timeline, this.status,
      h("div", "more-row", this.moreButton, this.allButton));
    main.append(head, h("div", "session-page", body, side));
    this.updateButtons();
  }

  updateButtons() {
    const left = Math.max(0, this.session.message_count - this.shown);
    this.moreButton.hidden = this.done;
    this.allButton.hidden = this.done;
    this.moreButton.textContent = `Load ${fmt(Math.min(PAGE, left))} more`;
    this.status.textContent = this.session.message_count === 0 ? "No messages."
      : this.done ? "" : `${fmt(this.shown)} of ${fmt(this.session.message_count)} messages shown`;
  }

  async loadMore() {
    if (this.done || this.loading) return this.loading;
    this.loading = (async () => {
      const sid = enc(this.session.id);
      let messages;
      try {
        ({ messages } = await api(`/v1/sessions/${sid}/messages?start=${this.next}&stop=${this.next + PAGE}&include_marked=true`));
      } catch (err) {
        this.done = true;
        showError(this.status, err);
        return;
      }
      if (this.gen !== generation) return;
      // A page is widened to whole tool-call groups, so pages can overlap at a
      // group: a message already shown is skipped. Numbers count shown messages
      // (results without a call are not served, so they can trail positions).
      const frag = document.createDocumentFragment();
      for (const message of messages) {
        if (this.byId.has(message.id)) continue;
        const seq = this.shown++;
        if (this.session.fork_seq > 0 && seq === this.session.fork_seq) frag.append(forkDivider(this.session));
        frag.append(this.renderMessage(message, seq));
      }
      this.timeline.append(frag);
      if (!titleOf(this.session) && this.next === 0) { // untitled: its opening line
        const first = messages.find((m) => m.role === "user" && textOf(m));
        if (first) this.heading.textContent = textOf(first, 120);
      }
      this.next += PAGE;
      if (this.next >= this.session.message_count) this.done = true;
      this.updateButtons();
      this.colorWindow();
    })();
    try {
      await this.loading;
    } finally {
      this.loading = null;
    }
    return undefined;
  }

  async loadAll() {
    while (!this.done && this.gen === generation) await this.loadMore();
  }

  async focus(id) {
    while (!this.byId.has(id) && !this.done && this.gen === generation) await this.loadMore();
    const found = this.byId.get(id);
    if (!found) return;
    for (let d = found.node.parentElement; d; d = d.parentElement) if (d.tagName === "DETAILS") d.open = true;
    found.node.scrollIntoView({ block: "center", behavior: "smooth" });
    found.node.classList.remove("flash");
    void found.node.offsetWidth;
    found.node.classList.add("flash");
  }

  // ---------------------------------------------------------------- one message

  renderMessage(message, seq) {
    const node = h("li", `msg ${roleClass(message.role)}`);
    node.dataset.role = message.role;
    node.dataset.id = message.id;
    const status = KV[String(message.kv_status ?? 1)] || "loaded";
    if (status !== "loaded") node.classList.add(`kv-${status}`);
    const tokens = tokensOf(message);
    const tokenCount = tokens ? h("span", "tokens", `${fmt(tokens.n)} tok`) : null;
    if (tokens) tokenCount.title = `${tokens.n} tokens (${tokens.counter})`;
    const head = h("div", "msg-head",
      h("span", "role", message.role),
      message.name ? h("span", "author", message.name) : null,
      h("span", "seq", `#${seq}`),
      when(message.created_at),
      tokenCount,
      status !== "loaded" ? h("span", `badge kv-badge kv-${status}`, status) : null);
    const place = this.window?.positions.get(message.id);
    if (place) {
      node.classList.add("in-window");
      const badge = h("span", "badge window-badge", `KV ${fmt(place.start)}–${fmt(place.start + place.size)}`);
      badge.title = "in the context window: its KV cache positions";
      head.append(badge);
    }
    const body = h("div", "msg-body");
    for (const part of message.parts || []) {
      const rendered = this.renderPart(part);
      if (rendered) body.append(rendered);
    }
    node.append(head, body);
    const summarized = summaryOf(message);
    if (summarized.length) node.append(this.summaryBox(summarized));
    const meta = { ...(message.metadata || {}) };
    delete meta[SUMMARY_KEY];
    if (Object.keys(meta).length) node.append(details("metadata", "msg-meta", h("pre", "json", pretty(meta))));
    this.byId.set(message.id, { message, node, seq });
    return node;
  }

  renderPart(part) {
    switch (part.type) {
      case "text":
        return renderMarkdown(part.text);
      case "image":
        return imagePart(part);
      case "audio":
        return audioPart(part);
      case "file":
        return filePart(part);
      case "tool_call":
        return this.toolCall(part);
      case "tool_result":
        return this.toolResult(part);
      case "reasoning":
        return reasoningPart(part);
      default:
        return details(`${part.type} part`, "unknown-part", h("pre", "json", pretty(part)));
    }
  }

  toolCall(part) {
    const result = h("div", "tool-result-slot", h("p", "pending", "No result yet."));
    const state = h("span", "badge call-state pending", "pending");
    const summary = h("summary", null, h("span", "tool-icon", "⚙"), h("span", "tool-name", part.name),
      h("span", "tool-args-preview", argsPreview(part.arguments)), state);
    const box = h("details", "tool-call", summary,
      h("div", "tool-section", h("div", "label", "Arguments"), codeBlock(pretty(part.arguments ?? {}), "json")),
      h("div", "tool-section", h("div", "label", "Result"), result),
      h("div", "tool-id", `call ${part.id}`));
    box.dataset.callId = part.id;
    this.calls.set(part.id, { box, result, state, name: part.name });
    return box;
  }

  toolResult(part) {
    const call = this.calls.get(part.call_id);
    const content = resultContent(part);
    if (call) {
      call.result.replaceChildren(content);
      call.state.textContent = part.is_error ? "error" : "done";
      call.state.className = `badge call-state ${part.is_error ? "error" : "done"}`;
      if (part.is_error) call.box.classList.add("failed");
      const jump = button(`↑ result of ${call.name}${part.is_error ? " (error)" : ""}`, "jump", () => {
        call.box.open = true;
        call.box.scrollIntoView({ block: "center", behavior: "smooth" });
      });
      // the tool message's own copy, rendered only when it is opened (a result can be large)
      const copy = details("result", `tool-result paired${part.is_error ? " failed" : ""}`);
      copy.addEventListener("toggle", () => {
        if (copy.open && copy.childElementCount === 1) copy.append(resultContent(part));
      });
      return h("div", "tool-result-ref", jump, copy);
    }
    const box = details(`result of ${part.name || "an unknown call"}${part.is_error ? " (error)" : ""}`,
      `tool-result orphan${part.is_error ? " failed" : ""}`, content,
      h("div", "tool-id", `no call ${part.call_id} before this message`));
    box.dataset.callId = part.call_id;
    return box;
  }

  summaryBox(ids) {
    const box = h("div", "summary-of", h("span", "label", `Summary of ${fmt(ids.length)} message${ids.length === 1 ? "" : "s"}: `));
    ids.slice(0, 50).forEach((id, k) => {
      const link = anchor(`#/s/${enc(this.session.id)}?m=${enc(id)}`, "summary-link", `${k + 1}`);
      link.title = id;
      link.addEventListener("click", (event) => {
        event.preventDefault();
        this.focus(id);
      });
      box.append(link, " ");
    });
    if (ids.length > 50) box.append(`… and ${ids.length - 50} more`);
    return box;
  }

  // ---------------------------------------------------------------- context window

  windowPanel() {
    const panel = h("section", "panel window-panel", h("h2", null, "Context window"));
    const w = this.window;
    if (!w) {
      panel.classList.add("empty");
      panel.append(h("p", "muted", "No window has been planned for this session. The service plans one on "
        + "POST /v1/sessions/{id}/window; it is shown here with each message's KV positions."));
      return panel;
    }
    const max = Math.max(1, w.max_tokens);
    const bar = h("div", "kv-bar");
    bar.setAttribute("role", "group");
    bar.setAttribute("aria-label", `KV cache: ${w.used} of ${w.max_tokens} tokens`);
    if (w.lastTurn?.reused_prefix_tokens) {
      const reused = h("div", "kv-reused");
      reused.style.width = `${Math.min(100, (100 * w.lastTurn.reused_prefix_tokens) / max)}%`;
      reused.title = `reused prefix: ${w.lastTurn.reused_prefix_tokens} tokens`;
      bar.append(reused);
    }
    this.segments = [];
    for (const seg of w.segments) {
      const s = h("button", "kv-seg");
      s.type = "button";
      s.style.left = `${(100 * seg.start) / max}%`;
      s.style.width = `${Math.max(0.15, (100 * seg.size) / max)}%`;
      if (w.pinned.has(seg.id)) s.classList.add("pinned");
      s.title = `${seg.id}: KV ${seg.start}–${seg.start + seg.size} (${seg.size} tokens)`;
      s.setAttribute("aria-label", s.title);
      s.addEventListener("click", () => this.focus(seg.id));
      s.dataset.id = seg.id;
      this.segments.push(s);
      bar.append(s);
    }
    if (w.low_water_tokens) {
      const mark = h("div", "kv-mark");
      mark.style.left = `${(100 * w.low_water_tokens) / max}%`;
      mark.title = `low water: ${w.low_water_tokens} tokens`;
      bar.append(mark);
    }
    const scale = h("div", "kv-scale", h("span", null, "0"), h("span", null, fmt(w.max_tokens)));
    const facts = h("dl", "facts",
      ...fact("in window", `${fmt(w.segments.length)} messages, ${fmt(w.used)} tokens`),
      ...fact("window size", `${fmt(w.max_tokens)} tokens (low water ${fmt(w.low_water_tokens)})`),
      ...fact("pinned head", `${fmt(w.pinned.size)} messages`),
      ...(w.lastTurn ? [
        ...fact("reused prefix", `${fmt(w.lastTurn.reused_prefix_tokens)} tokens`),
        ...fact("new this turn", `${fmt(w.lastTurn.new_tokens)} tokens`),
        ...fact("evicted last turn", `${fmt(w.lastTurn.evicted)} messages`),
      ] : []));
    const legend = h("div", "legend",
      h("span", "key-reused", "reused prefix"), h("span", "key-pinned", "pinned head"),
      h("span", "key-mark", "low water"));
    panel.append(bar, scale, legend, facts);
    return panel;
  }

  colorWindow() {
    for (const s of this.segments || []) {
      const found = this.byId.get(s.dataset.id);
      if (found) s.classList.add(roleClass(found.message.role));
    }
  }
}

function fact(term, value) {
  return [h("dt", null, term), h("dd", null, value)];
}

function details(label, cls, ...children) {
  return h("details", cls, h("summary", null, label), ...children);
}

function windowLayout(session) {
  const w = session.state?.[WINDOW_KEY];
  if (!w || !Array.isArray(w.layout) || !w.max_tokens) return null;
  // layout: [message id, KV start] of the last prompt, in order; a message ends
  // where the next starts, the last one at last_turn.end
  const lastTurn = w.last_turn && typeof w.last_turn === "object" ? w.last_turn : null;
  const entries = w.layout.filter((e) => Array.isArray(e) && e.length >= 2)
    .map(([id, start]) => [String(id), Number(start) || 0]);
  const positions = new Map();
  const segments = [];
  entries.forEach(([id, start], k) => {
    const end = k + 1 < entries.length ? entries[k + 1][1] : Number(lastTurn?.end) || start;
    const seg = { id, start, size: Math.max(0, end - start) };
    segments.push(seg);
    positions.set(id, seg);
  });
  const used = segments.length ? segments[segments.length - 1].start + segments[segments.length - 1].size : 0;
  return {
    max_tokens: Number(w.max_tokens), low_water_tokens: Number(w.low_water_tokens) || 0,
    segments, positions, used, pinned: new Set((w.pinned || []).map(String)), lastTurn,
  };
}

function summaryOf(message) {
  const record = message.metadata?.[SUMMARY_KEY];
  return record && Array.isArray(record.summary_of) ? record.summary_of.map(String) : [];
}

function argsPreview(args) {
  let text = "";
  try {
    text = JSON.stringify(args ?? {});
  } catch { /* leave empty */ }
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

function resultContent(part) {
  const content = part.content;
  if (typeof content === "string") return textBlock(content);
  const box = h("div", "result-parts");
  for (const item of content || []) {
    if (item.type === "text") box.append(textBlock(item.text));
    else if (item.type === "image") box.append(imagePart(item));
    else if (item.type === "file") box.append(filePart(item));
    else if (item.type === "audio") box.append(audioPart(item));
    else box.append(h("pre", "json", pretty(item)));
  }
  return box;
}

function textBlock(text) {
  const trimmed = String(text ?? "").trim();
  if (/^[[{]/.test(trimmed)) {
    try {
      return codeBlock(pretty(JSON.parse(trimmed)), "json");
    } catch { /* not JSON */ }
  }
  return preformatted(h("pre", "plain"), String(text ?? ""));
}

function reasoningPart(part) {
  const text = part.text || "";
  const label = text ? `Reasoning (${fmt(text.length)} characters)` : "Reasoning (encrypted, kept for the provider)";
  const box = details(label, "reasoning");
  if (text) box.append(renderMarkdown(text));
  else box.append(h("p", "muted", part.signature ? "signed reasoning without text" : "no readable text"));
  return box;
}

function imagePart(part) {
  const figure = h("figure", "image");
  const img = h("img");
  img.alt = part.attachment?.name || "image";
  img.loading = "lazy";
  const width = part.width || part.attachment?.width;
  const height = part.height || part.attachment?.height;
  if (width && height) {
    img.width = width;
    img.height = height;
  }
  const caption = h("figcaption", null, fileName(part));
  if (width && height) caption.append(` · ${width}×${height}`);
  if (part.attachment) {
    if (part.attachment.size) caption.append(` · ${bytes(part.attachment.size)}`);
    assetUrl(part.attachment).then((url) => { img.src = url; },
      (err) => { figure.replaceChildren(h("div", "error", `image not available: ${err.message}`), caption); });
  } else if (part.url && part.url.startsWith("data:image/")) {
    img.src = part.url;
  } else {
    const href = safeUrl(part.url);
    const link = href ? anchor(href, "external", `external image: ${part.url}`) : h("span", null, `image: ${part.url || "?"}`);
    if (href) { link.target = "_blank"; link.rel = "noopener noreferrer nofollow"; }
    figure.append(link);
    return figure;
  }
  img.addEventListener("click", () => {
    $("lightbox-img").src = img.src;
    $("lightbox").hidden = false;
  });
  figure.append(img, caption);
  return figure;
}

function audioPart(part) {
  const box = h("div", "audio");
  const audio = h("audio");
  audio.controls = true;
  if (part.attachment) assetUrl(part.attachment).then((url) => { audio.src = url; }, () => {});
  else if (part.url && part.url.startsWith("data:audio/")) audio.src = part.url;
  box.append(audio, h("div", "caption", fileName(part)));
  if (part.transcript) box.append(h("blockquote", "transcript", part.transcript));
  return box;
}

function filePart(part) {
  const name = fileName(part);
  const info = [part.attachment?.mime_type || part.mime_type, part.attachment ? bytes(part.attachment.size) : null]
    .filter(Boolean).join(", ");
  if (!part.attachment) {
    const href = safeUrl(part.url);
    if (href) {
      const a = anchor(href, "file-link", `⤓ ${name}`);
      a.target = "_blank";
      a.rel = "noopener noreferrer nofollow";
      return h("div", "file", a, info ? h("span", "muted", ` ${info}`) : null);
    }
    return h("div", "file", h("span", "file-link", `⤓ ${name}`), part.url ? h("span", "muted", ` ${part.url}`) : null);
  }
  const link = button(`⤓ ${name}`, "file-link", async () => {
    try {
      const url = await assetUrl(part.attachment);
      const a = h("a");
      a.href = url;
      a.download = String(name).replace(/[\\/:*?"<>|\u0000-\u001f]/g, "_") || "attachment";
      document.body.append(a);
      a.click();
      a.remove();
    } catch (err) {
      link.textContent = `⤓ ${name} (not available: ${err.message})`;
    }
  });
  return h("div", "file", link, info ? h("span", "muted", ` ${info}`) : null);
}

function forkDivider(session) {
  return h("li", "fork-divider", "▲ shared with ",
    anchor(`#/s/${enc(session.parent_id)}`, null, session.parent_id),
    ` · this branch starts at #${session.fork_seq} ▼`);
}

function branchPanel(session, lineage) {
  const panel = h("section", "panel branches", h("h2", null, "Branches"));
  if (!Array.isArray(lineage) || lineage.length <= 1) {
    panel.classList.add("empty");
    panel.append(h("p", "muted", "No other branches. A fork or an edited message makes one."));
    return panel;
  }
  const ids = new Set(lineage.map((s) => s.id));
  const children = new Map();
  const roots = [];
  for (const s of lineage) {
    if (s.parent_id && ids.has(s.parent_id)) {
      if (!children.has(s.parent_id)) children.set(s.parent_id, []);
      children.get(s.parent_id).push(s);
    } else {
      roots.push(s);
    }
  }
  const tree = (nodes, depth) => {
    const ul = h("ul", depth ? null : "tree");
    for (const s of nodes) {
      const label = titleOf(s) || s.id;
      const current = s.id === session.id;
      const link = anchor(`#/s/${enc(s.id)}`, current ? "current" : null, label);
      if (label !== s.id) link.append(h("span", "session-id", ` ${s.id}`));
      if (current) link.setAttribute("aria-current", "page");
      const li = h("li", null, link, h("span", "muted",
        s.parent_id ? ` at #${s.fork_seq} · ${fmt(s.message_count)} msgs` : ` · ${fmt(s.message_count)} msgs`));
      li.dataset.sessionId = s.id;
      if (children.has(s.id) && depth < 50) li.append(tree(children.get(s.id), depth + 1));
      ul.append(li);
    }
    return ul;
  };
  panel.append(tree(roots, 0));
  return panel;
}

function infoPanel(session) {
  const panel = h("section", "panel info", h("h2", null, "Session"));
  panel.append(h("dl", "facts",
    ...fact("id", session.id),
    ...fact("created", new Date(session.created_at).toLocaleString()),
    ...fact("updated", new Date(session.updated_at).toLocaleString()),
    ...(session.expires_at ? fact("expires", new Date(session.expires_at).toLocaleString()) : []),
    ...(session.parent_id ? fact("forked from", session.parent_id) : [])));
  if (Object.keys(session.metadata || {}).length) panel.append(details("metadata", "json-box", h("pre", "json", pretty(session.metadata))));
  if (Object.keys(session.state || {}).length) panel.append(details("state", "json-box", h("pre", "json", pretty(session.state))));
  return panel;
}

// ------------------------------------------------------------------ start

setupKeyDialog();
window.addEventListener("hashchange", route);
start();
