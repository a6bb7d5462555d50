// The session list: filters, search and one card per session.

import { api, me } from "./api.js";
import { anchor, button, enc, fmt, h, nav, plural, roleClass, showError, titleOf, when } from "./dom.js";
import { route } from "./router.js";

const LIST_PAGE = 50;

export function showList(params, main, gen) {
  const q = params.get("q") || "";
  const meta = params.get("meta") || "";
  const order = params.get("order") === "created" ? "created" : "recent";

  const form = searchForm({ q, meta, order, action: "/", label: "Search" });
  // the same words, as message hits (#/search): each match, not each session
  const hitsLink = q ? anchor(`#/search?${new URLSearchParams(meta ? { q, meta } : { q })}`,
    "search-switch", "Show each matching message") : null;
  const status = h("div", "list-status", "Loading…");
  status.setAttribute("role", "status");
  const list = h("ul", "sessions");
  // one request a page: titles, previews, snippets and the total come in it
  const { more, load } = pager({
    list, status, gen, row: sessionRow,
    request(cursor) {
      const qs = new URLSearchParams({ limit: String(LIST_PAGE), order });
      if (q) qs.set("q", q);
      addFilters(qs, meta);
      if (cursor) qs.set("cursor", cursor);
      return api(`/v1/sessions?${qs}`);
    },
    report(page, shown) {
      if (shown) return [countLine(shown, page)];
      return q || meta ? ["No session matches."] : emptyState();
    },
  });
  main.append(h("h1", "page-title", q ? `Sessions matching “${q}”` : "Sessions"), form, hitsLink,
    status, list, more);
  load();
}

// A list read a page at a time: request(cursor) answers a page ({items,
// next_cursor}), each item becomes row(item) in list, and report(page, shown)
// gives what the status line then says; "Load more" (more) reads the next
// page. Work of an older navigation (gen) is dropped.
export function pager({ list, status, gen, row, request, report }) {
  let cursor = null;
  let shown = 0;
  const more = button("Load more", "more", () => load());
  more.hidden = true;
  async function load() {
    more.disabled = true;
    let page;
    try {
      page = await request(cursor);
    } catch (err) {
      if (gen !== nav.generation) return;
      status.textContent = "";
      showError(status, err);
      more.disabled = false;
      return;
    }
    if (gen !== nav.generation) return;
    for (const item of page.items) {
      list.append(row(item));
      shown++;
    }
    cursor = page.next_cursor;
    more.hidden = !cursor;
    more.disabled = false;
    status.replaceChildren(...report(page, shown, cursor));
  }
  return { more, load };
}

// The filters form of the list (#/) and of message search (#/search): words,
// the metadata filter and, for the list, its order; submitting goes to
// #<action>?q=...&meta=...
export function searchForm({ q, meta, order, action, label }) {
  const form = h("form", "filters");
  form.setAttribute("role", "search");
  const qInput = h("input", "search");
  Object.assign(qInput, { type: "search", name: "q", value: q, placeholder: "Search words, \"a phrase\", prefix*…" });
  qInput.setAttribute("aria-label", label);
  const metaInput = h("input", "meta-filter");
  Object.assign(metaInput, { type: "text", name: "meta", value: meta, placeholder: "filter: user=…, key=value, …" });
  metaInput.setAttribute("aria-label", "Metadata filter");
  let orderSelect = null;
  if (order) {
    orderSelect = h("select", "order");
    orderSelect.setAttribute("aria-label", "Order");
    for (const [value, text] of [["recent", "Last activity"], ["created", "Created"]]) {
      const option = h("option", null, text);
      option.value = value;
      option.selected = value === order;
      orderSelect.append(option);
    }
    orderSelect.addEventListener("change", () => form.requestSubmit());
  }
  const submit = h("button", "primary", "Search");
  submit.type = "submit";
  form.append(qInput, metaInput, ...(orderSelect ? [orderSelect] : []), submit);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (qInput.value.trim()) next.set("q", qInput.value.trim());
    if (metaInput.value.trim()) next.set("meta", metaInput.value.trim());
    if (orderSelect && orderSelect.value !== "recent") next.set("order", orderSelect.value);
    const hash = `#${action}?${next}`;
    if (location.hash === hash) route(); else location.hash = hash;
  });
  return form;
}

// "user=ana, kind=x" as the query's filters: the session's user and metadata.<key>
export function addFilters(qs, meta) {
  for (const pair of meta.split(",")) {
    const [key, ...rest] = pair.split("=");
    if (!key.trim() || !rest.length) continue;
    if (key.trim() === "user") qs.set("user", rest.join("=").trim()); // the session's user
    else qs.append(`metadata.${key.trim()}`, rest.join("=").trim());
  }
}

// "50 of 17,552 sessions"; a search counts up to a bound: "50 of 1,000+ sessions"
export function countLine(shown, page) {
  if (!Number.isFinite(page.total)) { // a server without totals
    return `${plural(shown, "session")}${page.next_cursor ? " so far" : ""}`;
  }
  if (page.total_is_lower_bound) return `${fmt(shown)} of ${fmt(Math.max(page.total, shown))}+ sessions`;
  if (shown >= page.total) return plural(shown, "session");
  return `${fmt(shown)} of ${fmt(page.total)} sessions`;
}

// An empty list says where sessions go: with keys in use, the tenant the key
// sees and how imported sessions reach it (or a key reaches them).
function emptyState() {
  const code = (text) => h("code", null, text);
  if (!me.keyId) return ["No sessions yet. Import some with: ", code("chathistory import FILE")];
  const tenant = me.tenant || "?";
  const lines = [h("p", null, `No sessions in tenant ${tenant}.`)];
  if (tenant === "default") {
    lines.push(h("p", null, "Sessions imported with ", code("chathistory import FILE"),
      " go to tenant default, which this key sees."));
  } else {
    lines.push(h("p", null, "Sessions imported with ", code("chathistory import FILE"),
      " go to tenant default unless ", code(`--tenant ${tenant}`), " is given (",
      code(`chathistory import FILE --tenant ${tenant}`), "). A key of tenant default sees them (",
      code("chathistory keys create default"), ")."));
  }
  return lines;
}

export function sessionRow(session) {
  // the server's title (metadata title, else the first user message); an
  // older server sends none, and then only a metadata title is known
  const title = session.title === undefined ? titleOf(session) : session.title;
  const titleNode = h("span", "session-title", title || session.id);
  if (!title) titleNode.classList.add("untitled");
  const preview = session.preview && !repeats(session.preview, title) ? session.preview : null;
  const meta = h("span", "session-meta",
    h("span", "session-id", session.id),
    h("span", "count", plural(session.message_count, "message")),
    h("span", "count", `${fmt(session.token_count)} tokens`),
    session.user ? h("span", "user", `user ${session.user}`) : null,
    session.parent_id ? h("span", "branch-flag", `fork of ${session.parent_id}`) : null,
    when(session.updated_at));
  // an imported branch (ChatGPT's alternatives) says which one it is: the same
  // conversation title on two cards is told apart here
  const branch = typeof session.metadata?.branch === "string" ? session.metadata.branch.trim() : "";
  if (branch) {
    // where it parts: two alternatives "2 of 2" at different messages differ here
    const at = session.parent_id && session.fork_seq > 0 ? ` at #${session.fork_seq}`
      : typeof session.metadata?.branch_of === "string" ? " at the first message" : "";
    titleNode.append(h("span", "branch-label", ` · branch ${branch}${at}`));
  }
  const snippet = session.snippet ? snippetLink(session.id, session.snippet) : null;
  const link = anchor(`#/s/${enc(session.id)}`, "session-link", titleNode,
    preview && !snippet ? h("span", "session-preview", preview) : null, meta);
  const row = h("li", "session-row", link, snippet);
  row.dataset.sessionId = session.id;
  return row;
}

// true when a preview only says again what the title (cut from the same
// first message) says
function repeats(preview, title) {
  if (!title) return false;
  const stem = title.endsWith("…") ? title.slice(0, -1) : title;
  return preview.startsWith(stem);
}

// Where a search matched: the message's role and text, each match in a
// <mark>, linking to that message in its session.
function snippetLink(sessionId, snippet) {
  const role = String(snippet.role || "");
  const text = h("span", "snippet-text", ...highlighted(String(snippet.text || ""), snippet.match));
  const at = snippet.message_id ? `?m=${enc(snippet.message_id)}` : "";
  const link = anchor(`#/s/${enc(sessionId)}${at}`, "session-snippet",
    h("span", `snippet-role ${roleClass(role)}`, role), text);
  link.title = "Open the session at this message";
  return link;
}

// text split at the [start, end) ranges (UTF-16 offsets, JavaScript's string
// indices) into text and <mark> nodes; ranges out of order, overlapping or
// out of bounds are clipped or skipped rather than trusted
export function highlighted(text, ranges) {
  const spans = (Array.isArray(ranges) ? ranges : [])
    .filter((r) => Array.isArray(r) && Number.isInteger(r[0]) && Number.isInteger(r[1]))
    .sort((a, b) => a[0] - b[0]);
  const out = [];
  let at = 0;
  for (const [start, end] of spans) {
    const from = Math.max(start, at);
    const to = Math.min(end, text.length);
    if (to <= from) continue;
    if (from > at) out.push(text.slice(at, from));
    out.push(h("mark", null, text.slice(from, to)));
    at = to;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}
