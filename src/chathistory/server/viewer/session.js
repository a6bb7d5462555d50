// A session's page: its timeline, opened at the newest messages and read
// backwards a page at a time ("Load earlier"), long messages collapsed, and
// the side panels (the context window is window.js's).

import { api } from "./api.js";
import { branchPanel, branchSwitcher, forkDivider, infoPanel } from "./branches.js";
import {
  anchor, button, bytes, details, enc, fmt, h, KV, nav, plural, pretty, roleClass, showError,
  textOf, titleOf, tokensOf, when,
} from "./dom.js";
import { compactionDivider, PartRenderer } from "./parts.js";
import { WindowPanel } from "./window.js";

const PAGE = 200; // messages fetched per request on a session page
export const SUMMARY_KEY = "chathistory";
// a message body taller than LONG_PX (or 1.4 times the collapsed height, 60% of
// the window's height) is collapsed; a text of SURELY_LONG_CHARS is collapsed
// before it is laid out, so that it never stretches the page
const LONG_PX = 1200;
const LONG_FACTOR = 1.4;
const SURELY_LONG_CHARS = 40_000;

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
  await view.open(params.get("m"));
}

export class SessionView {
  constructor(session, lineage, main, gen) {
    this.session = session;
    this.gen = gen;
    // the timeline holds the messages at positions first..message_count-1
    // (0 = oldest); it grows backwards
    this.first = session.message_count;
    this.byId = new Map(); // message id -> {message, node, seq}
    this.parts = new PartRenderer(); // tool calls and results, paired
    this.switcher = branchSwitcher(session, lineage); // seq -> "‹ 1/2 ›" where branches part, or null
    this.window = new WindowPanel(session, {
      onChange: () => this.windowChanged(),
      focus: (messageId) => this.focus(messageId),
    });
    this.planned = this.window.planned;
    this.seen = this.window.seen; // ids of the messages in the window shown, or null

    const title = titleOf(session);
    const head = h("div", "session-head",
      anchor("#/", "back", "← Sessions"),
      this.heading = h("h1", "page-title", title || session.title || session.id),
      h("div", "session-facts",
        h("span", "session-id", session.id),
        h("span", null, plural(session.message_count, "message")),
        h("span", null, `${fmt(session.token_count)} tokens`),
        h("span", null, `version ${session.version}`),
        session.user ? h("span", null, `user ${session.user}`) : null,
        h("span", null, "updated ", when(session.updated_at))));

    this.timeline = h("ol", "timeline");
    this.timeline.setAttribute("aria-label", "Messages");
    this.earlierButton = button("Load earlier", "more earlier", () => this.loadEarlier());
    this.allButton = button("Load all", "more", () => this.loadAll());
    this.status = h("p", "list-status timeline-status");
    const tools = h("div", "timeline-tools");
    const toggle = h("label", "only-window");
    this.onlyBox = h("input");
    this.onlyBox.type = "checkbox";
    this.onlyBox.addEventListener("change", () => this.showOnlyWindow(this.onlyBox.checked));
    toggle.append(this.onlyBox, " only what the model sees");
    tools.append(toggle);
    const expand = h("label", "expand-all");
    const expandBox = h("input");
    expandBox.type = "checkbox";
    expandBox.addEventListener("change", () => {
      for (const d of this.timeline.querySelectorAll("details.tool-call, details.reasoning")) d.open = expandBox.checked;
    });
    expand.append(expandBox, " expand tools and reasoning");
    tools.append(expand);

    const side = h("aside", "side",
      this.window.node,
      branchPanel(session, lineage),
      infoPanel(session));
    const body = h("section", "conversation", tools,
      h("div", "earlier-row", this.earlierButton, this.allButton, this.status), this.timeline);
    main.append(head, h("div", "session-page", body, side));
    this.updateButtons();
  }

  // the newest page, then the message ?m= names (loading back until it is
  // found), else the newest message in view
  async open(focusId) {
    this.window.start();
    await this.loadEarlier();
    if (this.gen !== nav.generation) return;
    this.findTitle();
    if (focusId) {
      await this.focus(focusId);
      return;
    }
    this.stickToNewest();
  }

  // the newest message stays at the bottom of the view while what is above it
  // settles (images, the window's marks), until the reader scrolls or clicks
  stickToNewest() {
    const toEnd = () => this.timeline.lastElementChild?.scrollIntoView({ block: "end" });
    toEnd();
    const watch = new ResizeObserver(() => {
      if (this.gen === nav.generation) toEnd();
      else stop();
    });
    const events = ["wheel", "touchstart", "keydown", "mousedown"];
    const stop = () => {
      watch.disconnect();
      for (const name of events) window.removeEventListener(name, stop, true);
      window.removeEventListener("scroll", moved);
    };
    // a scroll of the reader's own (a scroll bar dragged) leaves the newest message
    const moved = () => {
      const last = this.timeline.lastElementChild;
      if (!last || last.getBoundingClientRect().bottom > window.innerHeight + 48) stop();
    };
    for (const name of events) window.addEventListener(name, stop, { capture: true, passive: true });
    window.addEventListener("scroll", moved, { passive: true });
    watch.observe(this.timeline);
  }

  updateButtons() {
    const n = this.session.message_count;
    const done = this.first <= 0;
    this.earlierButton.hidden = done;
    this.allButton.hidden = done;
    this.earlierButton.textContent = `Load ${fmt(Math.min(PAGE, this.first))} earlier`;
    this.status.textContent = n === 0 ? "No messages."
      : done ? "" : `The newest ${fmt(n - this.first)} of ${fmt(n)} messages are shown.`;
  }

  // prepends the page of messages before the first one shown, keeping what is
  // in view where it is
  async loadEarlier() {
    if (this.first <= 0 || this.loading) return this.loading;
    this.loading = (async () => {
      const stop = this.first;
      const start = Math.max(0, stop - PAGE);
      let messages;
      try {
        ({ messages } = await api(`/v1/sessions/${enc(this.session.id)}/messages?start=${start}&stop=${stop}&include_marked=true`));
      } catch (err) {
        this.first = 0;
        this.earlierButton.hidden = this.allButton.hidden = true;
        showError(this.status, err);
        return;
      }
      if (this.gen !== nav.generation) return;
      // A page is widened to whole tool-call groups: backwards at its start (so
      // a tool result's call comes in the same page, before it) and forwards at
      // its stop, which is the start of a group already shown (a page starts at
      // one), so pages do not overlap; a message already shown is skipped all
      // the same. Positions count back from the stop.
      const fresh = messages.filter((m) => !this.byId.has(m.id));
      const firstSeq = stop - fresh.length;
      const anchorNode = this.timeline.querySelector(":scope > li.msg");
      const before = anchorNode?.getBoundingClientRect().top;
      const frag = document.createDocumentFragment();
      const nodes = [];
      fresh.forEach((message, k) => {
        const seq = firstSeq + k;
        if (this.session.fork_seq > 0 && seq === this.session.fork_seq) frag.append(forkDivider(this.session));
        const compaction = (message.parts || []).find((part) => part.type === "compaction");
        if (compaction) frag.append(compactionDivider(compaction));
        const node = this.renderMessage(message, seq);
        nodes.push(node);
        frag.append(node);
      });
      this.timeline.prepend(frag);
      // a page shorter than asked (orphan tool results are not served) still
      // moves the start back to where it was asked to begin
      this.first = Math.max(0, Math.min(firstSeq, start));
      this.collapseLong(nodes);
      if (anchorNode) window.scrollBy(0, anchorNode.getBoundingClientRect().top - before);
      this.updateButtons();
      this.window.colour(this.byId);
      this.drawGaps();
    })();
    try {
      await this.loading;
    } finally {
      this.loading = null;
    }
    return undefined;
  }

  async loadAll() {
    while (this.first > 0 && this.gen === nav.generation) await this.loadEarlier();
  }

  // loads back until every id is on the page (or the session's start)
  async loadUntil(ids) {
    const missing = () => [...ids].some((id) => !this.byId.has(id));
    while (missing() && this.first > 0 && this.gen === nav.generation) await this.loadEarlier();
  }

  // an untitled session is named by its opening user message, read on its own
  // when the first page shown is not the session's first
  async findTitle() {
    if (titleOf(this.session) || this.session.title) return;
    let opening = [...this.byId.values()].map((found) => found.message);
    if (this.first > 0) {
      try {
        ({ messages: opening } = await api(`/v1/sessions/${enc(this.session.id)}/messages?start=0&stop=8&include_marked=true`));
      } catch {
        return;
      }
    }
    const user = opening.find((m) => m.role === "user" && textOf(m));
    if (user && this.gen === nav.generation) this.heading.textContent = textOf(user, 120);
  }

  async focus(id) {
    await this.loadUntil([id]);
    const found = this.byId.get(id);
    if (!found) return;
    for (let d = found.node.parentElement; d; d = d.parentElement) if (d.tagName === "DETAILS") d.open = true;
    found.node.scrollIntoView({ block: "center", behavior: "smooth" });
    found.node.classList.remove("flash");
    void found.node.offsetWidth;
    found.node.classList.add("flash");
  }

  // ---------------------------------------------------------------- long messages

  // collapses the bodies of `nodes` that are much taller than the collapsed
  // height; one layout for all of them (write, then read, then write)
  collapseLong(nodes) {
    const height = collapsedHeight();
    const measured = nodes.map((node) => {
      const body = node.querySelector(":scope > .msg-body");
      return [node, body, body.scrollHeight];
    });
    for (const [node, body, tall] of measured) {
      const long = tall > Math.max(LONG_PX, height * LONG_FACTOR);
      body.classList.toggle("collapsed", long);
      if (long && !node.querySelector(":scope > .show-all")) body.after(this.showAllButton(node, body));
    }
  }

  showAllButton(node, body) {
    const { lines, size } = extent(this.byId.get(node.dataset.id).message);
    const label = `Show all (${lines > 1 ? `${plural(lines, "line")}, ` : ""}${bytes(size)})`;
    const toggle = button(label, "show-all", () => {
      const open = body.classList.toggle("collapsed");
      toggle.textContent = open ? label : "Show less";
      toggle.setAttribute("aria-expanded", String(!open));
      if (open && node.getBoundingClientRect().top < 0) node.scrollIntoView({ block: "start" });
    });
    toggle.setAttribute("aria-expanded", "false");
    return toggle;
  }

  // ---------------------------------------------------------------- the window in the timeline

  windowChanged() {
    const seen = this.seen = this.window.seen;
    for (const { node, message } of this.byId.values()) node.classList.toggle("in-window", Boolean(seen?.has(message.id)));
    if (this.onlyBox.checked && seen) this.loadUntil(seen);
    this.drawGaps();
  }

  async showOnlyWindow(only) {
    this.timeline.classList.toggle("window-only", only);
    const seen = this.seen;
    if (only && seen) await this.loadUntil(seen);
    this.drawGaps();
  }

  // in "only what the model sees", a marker where messages are hidden, saying
  // how many; a click shows them (and hides them again)
  drawGaps() {
    for (const gap of this.timeline.querySelectorAll(":scope > .window-gap")) gap.remove();
    const seen = this.seen;
    if (!seen || !this.timeline.classList.contains("window-only")) return;
    const nodes = [...this.timeline.querySelectorAll(":scope > li.msg")];
    let run = [];
    let unloaded = this.first; // messages before the first shown: none is in the window once it is all loaded
    let earlier = true;
    const close = (beforeNode) => {
      const hidden = unloaded + run.length;
      // a marker goes above the compaction divider of the message it comes before
      const divider = beforeNode?.previousElementSibling;
      const at = divider?.classList.contains("compaction-divider") ? divider : beforeNode;
      if (hidden) this.timeline.insertBefore(this.gapMarker(run, hidden, earlier, !beforeNode), at);
      run = [];
      unloaded = 0;
      earlier = false;
    };
    for (const node of nodes) {
      if (seen.has(node.dataset.id)) close(node);
      else run.push(node);
    }
    close(null);
  }

  gapMarker(run, hidden, earlier, last) {
    // a run after the window's last message is newer than it; any other, older
    const what = earlier && last ? "" : last ? "later " : "earlier ";
    const shown = run.length > 0 && run.every((node) => node.classList.contains("revealed"));
    const label = `${plural(hidden, `${what}message`)} not sent to the model`;
    const marker = button(shown ? `▾ ${label} (shown) · hide them` : `… ${label} … · show`, "gap-button", () => {
      for (const node of run) node.classList.toggle("revealed", !shown);
      this.drawGaps();
    });
    marker.disabled = run.length === 0;
    if (run.length < hidden && run.length) marker.title = `${fmt(hidden - run.length)} of them are not loaded: "Load earlier" reads them`;
    const li = h("li", "window-gap", marker);
    li.dataset.hidden = String(hidden);
    return li;
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
      this.switcher(seq),
      when(message.created_at),
      tokenCount,
      status !== "loaded" ? h("span", `badge kv-badge kv-${status}`, status) : null);
    const place = this.planned?.positions.get(message.id);
    if (place) {
      const badge = h("span", "badge window-badge", `KV ${fmt(place.start)}–${fmt(place.start + place.size)}`);
      badge.title = "in the planned window: where it sits in the model's context (KV cache positions)";
      head.append(badge);
    }
    if (this.seen?.has(message.id)) node.classList.add("in-window");
    const body = h("div", "msg-body");
    let chars = 0;
    for (const part of message.parts || []) {
      chars += (part.text?.length || 0) + (typeof part.content === "string" ? part.content.length : 0);
      const rendered = this.parts.render(part);
      if (rendered) body.append(rendered);
    }
    // surely long: collapsed before it is ever laid out at full height
    if (chars > SURELY_LONG_CHARS) body.classList.add("collapsed");
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
}

// the height a long message body is collapsed to, in pixels (session.css's
// .msg-body.collapsed says the same)
function collapsedHeight() {
  return Math.min(0.6 * window.innerHeight, 1200);
}

// a message's text, for the size of a long one: lines and bytes (UTF-8)
export function extent(message) {
  const texts = [];
  for (const part of message.parts || []) {
    if (typeof part.text === "string") texts.push(part.text);
    if (part.type === "tool_call") texts.push(pretty(part.arguments ?? {}));
    if (typeof part.content === "string") texts.push(part.content);
    else if (Array.isArray(part.content)) for (const item of part.content) if (typeof item.text === "string") texts.push(item.text);
  }
  const text = texts.join("\n");
  let lines = 1;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) lines++;
  return { lines, size: new TextEncoder().encode(text).length };
}

export function summaryOf(message) {
  const record = message.metadata?.[SUMMARY_KEY];
  return record && Array.isArray(record.summary_of) ? record.summary_of.map(String) : [];
}

