// The context-window panel of a session's page: the window the service last
// planned (if any), and a budget control that previews, without writing
// anything, which messages the model would see at that many tokens.

import { api } from "./api.js";
import { button, enc, fact, fmt, h, plural, roleClass } from "./dom.js";

const WINDOW_KEY = "chathistory.window";
const PRESETS = [4000, 8000, 32000, 128000];
const DEFAULT_BUDGET = 8000;
const MAX_BUDGET = 10_000_000;

export class WindowPanel {
  // onChange() is called whenever the set of messages in the window changes;
  // focus(id) goes to a message of the timeline
  constructor(session, { onChange, focus }) {
    this.session = session;
    this.onChange = onChange;
    this.focus = focus;
    this.planned = windowLayout(session);
    this.preview = null; // the last preview's answer, while it is the one shown
    this.asked = 0; // previews asked for: an older answer is dropped
    this.node = h("section", "panel window-panel", h("h2", null, "Context window"));
    if (this.planned) this.node.append(this.plannedSection());
    this.node.append(this.budgetSection());
  }

  // the ids of the messages in the window shown: the preview's, else the
  // planned window's; null when there is neither
  get seen() {
    if (this.preview) return this.preview.ids;
    if (this.planned) return new Set(this.planned.segments.map((s) => s.id));
    return null;
  }

  // what the timeline's gap markers say the hidden messages are
  get source() {
    return this.preview ? "preview" : this.planned ? "planned" : null;
  }

  start() {
    // a session without a planned window gets a preview at once; one with a
    // planned window shows it until a budget is picked
    if (!this.planned) this.ask(this.budget());
  }

  budget() {
    const n = Math.round(Number(this.input.value));
    return Number.isFinite(n) && n >= 0 ? Math.min(n, MAX_BUDGET) : DEFAULT_BUDGET;
  }

  // ------------------------------------------------------------ the budget control

  budgetSection() {
    const box = h("div", "window-budget");
    this.input = h("input", "budget-input");
    this.input.type = "number";
    this.input.min = "0";
    this.input.max = String(MAX_BUDGET);
    this.input.step = "1000";
    this.input.inputMode = "numeric";
    this.input.value = String(this.planned?.max_tokens || DEFAULT_BUDGET);
    this.input.setAttribute("aria-label", "Token budget");
    const form = h("form", "budget-form",
      h("label", null, h("span", "budget-label", "Budget"), this.input, h("span", "muted", "tokens")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.ask(this.budget());
    });
    this.input.addEventListener("change", () => this.ask(this.budget()));
    this.presets = PRESETS.map((n) => {
      const b = button(`${n / 1000}k`, "preset", () => {
        this.input.value = String(n);
        this.ask(n);
      });
      b.dataset.tokens = String(n);
      b.title = `${fmt(n)} tokens`;
      return b;
    });
    form.append(h("span", "presets", ...this.presets));
    this.says = h("p", "window-says");
    this.says.setAttribute("aria-live", "polite");
    this.back = button("Show the planned window again", "link-button back-to-plan", () => this.showPlanned());
    this.back.hidden = true;
    if (this.planned) {
      this.says.textContent = "Pick a budget to see what the model would see with it.";
      box.append(h("h3", null, "At another budget"));
    }
    box.append(form, this.says, this.back);
    this.markPresets();
    return box;
  }

  markPresets() {
    const n = this.budget();
    for (const b of this.presets) b.setAttribute("aria-pressed", String(Number(b.dataset.tokens) === n));
  }

  async ask(maxTokens) {
    const asked = ++this.asked;
    this.markPresets();
    this.says.classList.remove("error");
    this.says.textContent = `Counting what fits in ${fmt(maxTokens)} tokens…`;
    let found;
    try {
      found = await api(`/v1/sessions/${enc(this.session.id)}/window?max_tokens=${maxTokens}`);
    } catch (err) {
      if (asked !== this.asked) return;
      this.says.classList.add("error");
      this.says.textContent = `Could not preview the window: ${err.message || err}`;
      return;
    }
    if (asked !== this.asked) return;
    this.preview = { ...found, ids: new Set((found.message_ids || []).map(String)) };
    this.says.textContent = previewSentence(found);
    this.back.hidden = !this.planned;
    this.node.classList.add("previewing");
    this.onChange();
  }

  showPlanned() {
    this.asked++;
    this.preview = null;
    this.back.hidden = true;
    this.node.classList.remove("previewing");
    this.says.textContent = "Pick a budget to see what the model would see with it.";
    this.onChange();
  }

  // ------------------------------------------------------------ the planned window

  plannedSection() {
    const w = this.planned;
    const box = h("div", "window-planned");
    const max = Math.max(1, w.max_tokens);
    box.append(h("p", "window-plan-says",
      `When the window was last planned, the model saw ${plural(w.segments.length, "message")}, `
      + `${fmt(w.used)} of ${fmt(w.max_tokens)} tokens.`));
    const bar = h("div", "kv-bar");
    bar.setAttribute("role", "group");
    bar.setAttribute("aria-label", `The planned window: ${fmt(w.used)} of ${fmt(w.max_tokens)} tokens`);
    if (w.lastTurn?.reused_prefix_tokens) {
      const reused = h("div", "kv-reused");
      reused.style.width = `${Math.min(100, (100 * w.lastTurn.reused_prefix_tokens) / max)}%`;
      reused.title = `kept from the turn before: ${fmt(w.lastTurn.reused_prefix_tokens)} tokens`;
      bar.append(reused);
    }
    this.segments = [];
    for (const seg of w.segments) {
      const s = h("button", "kv-seg");
      s.type = "button";
      s.style.left = `${(100 * seg.start) / max}%`;
      s.style.width = `${Math.max(0.15, (100 * seg.size) / max)}%`;
      if (w.pinned.has(seg.id)) s.classList.add("pinned");
      s.title = `${fmt(seg.size)} tokens, at ${fmt(seg.start)}–${fmt(seg.start + seg.size)} (${seg.id})`;
      s.setAttribute("aria-label", `message ${seg.id}, ${fmt(seg.size)} tokens`);
      s.addEventListener("click", () => this.focus(seg.id));
      s.dataset.id = seg.id;
      this.segments.push(s);
      bar.append(s);
    }
    if (w.low_water_tokens) {
      const mark = h("div", "kv-mark");
      mark.style.left = `${(100 * w.low_water_tokens) / max}%`;
      mark.title = `trimmed back to ${fmt(w.low_water_tokens)} tokens when full`;
      bar.append(mark);
    }
    const scale = h("div", "kv-scale", h("span", null, "0"), h("span", null, `${fmt(w.max_tokens)} tokens`));
    const facts = h("dl", "facts",
      ...fact("seen", `${plural(w.segments.length, "message")}, ${fmt(w.used)} tokens`),
      ...fact("window size", `${fmt(w.max_tokens)} tokens`
        + (w.low_water_tokens ? `, trimmed back to ${fmt(w.low_water_tokens)} when full` : "")),
      ...fact("always kept", `${plural(w.pinned.size, "message")} at its start`),
      ...(w.lastTurn ? [
        ...fact("kept from the turn before", `${fmt(w.lastTurn.reused_prefix_tokens)} tokens`),
        ...fact("new this turn", `${fmt(w.lastTurn.new_tokens)} tokens`),
        ...fact("dropped this turn", plural(Number(w.lastTurn.evicted) || 0, "message")),
      ] : []));
    const legend = h("div", "legend",
      h("span", "key-reused", "kept from the turn before"), h("span", "key-pinned", "always kept"),
      h("span", "key-mark", "trim line"));
    box.append(bar, scale, legend, facts);
    return box;
  }

  // the planned window's segments take the colour of their message's role,
  // once the message is on the page
  colour(byId) {
    for (const s of this.segments || []) {
      const found = byId.get(s.dataset.id);
      if (found) s.classList.add(roleClass(found.message.role));
    }
  }
}

export function previewSentence(found) {
  const seen = Number(found.messages) || 0;
  const left = Number(found.left_out) || 0;
  const tokens = `${fmt(found.tokens)} tokens`;
  if (!seen) {
    return left ? `Nothing fits in ${fmt(found.max_tokens)} tokens: the model would see none of the `
      + `${plural(left, "message")}.` : "There are no messages to send.";
  }
  if (!left) return `The model would see ${seen === 1 ? "the only message" : `all ${fmt(seen)} messages`}, ${tokens}.`;
  return `The model would see ${plural(seen, "message")}, ${tokens}; `
    + `${plural(left, "older message")} ${left === 1 ? "is" : "are"} left out.`;
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
