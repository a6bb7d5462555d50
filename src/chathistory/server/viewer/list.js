// The session list: filters, search and one card per session.

import { api } from "./api.js";
import { anchor, button, enc, fmt, h, nav, plural, showError, textOf, titleOf, when } from "./dom.js";
import { route } from "./router.js";

const LIST_PAGE = 50;

export function showList(params, main, gen) {
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
      if (gen !== nav.generation) return;
      status.textContent = "";
      showError(status, err);
      return;
    }
    if (gen !== nav.generation) return;
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

export function queue(concurrency) {
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

export function sessionRow(session, previews, gen) {
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
      if (gen !== nav.generation) return;
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

