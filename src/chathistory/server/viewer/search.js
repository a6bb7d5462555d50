// Message search (#/search?q=...): the tenant's messages that match, best
// first (GET /v1/search), each with its session, position, role and snippet,
// the matched words in <mark>, linking to the message in its session.

import { api } from "./api.js";
import { anchor, enc, fmt, h, plural, roleClass } from "./dom.js";
import { addFilters, highlighted, pager, searchForm } from "./list.js";

const SEARCH_PAGE = 20;

export function showSearch(params, main, gen) {
  const q = params.get("q") || "";
  const meta = params.get("meta") || "";
  const filters = { ...(q ? { q } : {}), ...(meta ? { meta } : {}) };
  const sessionsLink = anchor(`#/?${new URLSearchParams(filters)}`, "search-switch",
    "Show matching sessions instead");
  const form = searchForm({ q, meta, action: "/search", label: "Search messages" });
  const status = h("div", "list-status", q ? "Searching…" : "Type words to search messages.");
  status.setAttribute("role", "status");
  const list = h("ol", "hits");
  const { more, load } = pager({
    list, status, gen, row: hitRow,
    request(cursor) {
      const qs = new URLSearchParams({ q, limit: String(SEARCH_PAGE) });
      addFilters(qs, meta);
      if (cursor) qs.set("cursor", cursor);
      return api(`/v1/search?${qs}`);
    },
    report(page, shown, cursor) {
      let line = shown ? `${plural(shown, "message")}${cursor ? " so far" : ""}` : "No message matches.";
      // a store without a search index reads the newest messages only
      if (Number.isFinite(page.scanned)) line += ` (searched the newest ${fmt(page.scanned)} messages)`;
      return [line];
    },
  });
  main.append(h("h1", "page-title", q ? `Messages matching “${q}”` : "Search messages"),
    form, sessionsLink, status, list, more);
  if (q) load();
}

// One hit: where it is (session, position, role) and its snippet, linking to
// the message in its session (the session that stores it: a fork's shared
// prefix is its parent's).
export function hitRow(hit) {
  const role = String(hit.message?.role || "");
  const where = h("span", "hit-where",
    h("span", `snippet-role ${roleClass(role)}`, role),
    h("span", "session-id", String(hit.session_id)),
    h("span", "count", `#${fmt(hit.seq)}`));
  const text = h("span", "snippet-text", ...highlighted(String(hit.snippet || ""), hit.marks));
  const at = hit.message?.id ? `?m=${enc(hit.message.id)}` : "";
  const link = anchor(`#/s/${enc(hit.session_id)}${at}`, "hit-link", where, text);
  link.title = "Open the session at this message";
  const row = h("li", "hit-row", link);
  row.dataset.sessionId = String(hit.session_id);
  row.dataset.messageId = String(hit.message?.id || "");
  return row;
}
