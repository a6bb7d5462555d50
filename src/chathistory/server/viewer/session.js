// A session's page: its timeline (loaded a page at a time), the context window
// panel and the side panels.

import { api } from "./api.js";
import { branchPanel, forkDivider, infoPanel } from "./branches.js";
import {
  anchor, button, details, enc, fact, fmt, h, KV, nav, plural, pretty, roleClass, showError,
  textOf, titleOf, tokensOf, when,
} from "./dom.js";
import { PartRenderer } from "./parts.js";

const PAGE = 200; // messages fetched per request on a session page
const WINDOW_KEY = "chathistory.window";
export const SUMMARY_KEY = "chathistory";

export async function showSession(id, params, main, gen) {
  let session;
  let lineage;
  try {
    [session, lineage] = await Promise.all([
      api(`/v1/sessions/${enc(id)}`),
      api(`/v1/sessions/${enc(id)}/lineage`).catch(() => []),
    ]);
  } catch (err) {
    if (gen !== nav.generation) return;
    main.append(anchor("#/", "back", "← Sessions"));
    showError(main, err);
    return;
  }
  if (gen !== nav.generation) return;
  const view = new SessionView(session, lineage, main, gen);
  await view.loadMore();
  const focus = params.get("m");
  if (focus) view.focus(focus);
}

export class SessionView {
  constructor(session, lineage, main, gen) {
    this.session = session;
    this.gen = gen;
    this.next = 0; // the next page starts at this position
    this.shown = 0;
    this.done = session.message_count === 0;
    this.byId = new Map(); // message id -> {message, node, seq}
    this.parts = new PartRenderer(); // tool calls and results, paired
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
      if (this.gen !== nav.generation) return;
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
    while (!this.done && this.gen === nav.generation) await this.loadMore();
  }

  async focus(id) {
    while (!this.byId.has(id) && !this.done && this.gen === nav.generation) await this.loadMore();
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
      const rendered = this.parts.render(part);
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


export function windowLayout(session) {
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

export function summaryOf(message) {
  const record = message.metadata?.[SUMMARY_KEY];
  return record && Array.isArray(record.summary_of) ? record.summary_of.map(String) : [];
}

