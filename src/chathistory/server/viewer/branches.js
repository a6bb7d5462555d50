// The side panels: branches of the session's tree and the session's facts.

import { api } from "./api.js";
import { anchor, details, enc, fact, fmt, h, pretty, textOf, TITLE_LIMIT, titleOf } from "./dom.js";

export function forkDivider(session) {
  return h("li", "fork-divider", "▲ shared with ",
    anchor(`#/s/${enc(session.parent_id)}`, null, session.parent_id),
    ` · this branch starts at #${session.fork_seq} ▼`);
}

// ---------------------------------------------------------------- alternatives
//
// A fork shares its parent's first fork_seq messages (the same stored
// messages) and owns the ones from fork_seq on. So the message at position p
// of a session is owned by the session itself when p >= its fork_seq, else by
// its parent's owner of p; two sessions show the same message at p when the
// same session owns it. The alternatives at p, seen from session S, are the
// different messages at p among the sessions that share S's first p messages:
// ChatGPT's "< 2/3 >" under an edited prompt or a regenerated answer. An
// importer that knows the source's own order says it in a fork's metadata
// (`branch`: "2 of 3", ChatGPT's number at the fork point); alternatives
// without it take the numbers left, oldest first.

const MAX_DEPTH = 200;
const BRANCH_NUMBER = /^(\d+) of (\d+)$/;

class Tree {
  constructor(lineage) {
    this.sessions = Array.isArray(lineage) ? lineage : [];
    this.byId = new Map(this.sessions.map((s) => [s.id, s]));
    this.forkPoints = [...new Set(this.sessions.filter((s) => s.parent_id && s.fork_seq > 0)
      .map((s) => s.fork_seq))].sort((a, b) => a - b);
  }

  ownerAt(session, position) {
    // the id of the session owning the message at `position` of `session`
    let s = session;
    for (let depth = 0; depth < MAX_DEPTH; depth++) {
      if (!s.parent_id || position >= (s.fork_seq || 0)) return s.id;
      const parent = this.byId.get(s.parent_id);
      if (!parent) return s.parent_id; // a parent out of sight (expired): its id stands for it
      s = parent;
    }
    return null;
  }

  alternativesAt(session, position) {
    // [{owner, number}] of the different messages at `position` among the
    // sessions that share `session`'s first `position` messages, in order;
    // null when there is one
    if (position < 1 || position >= session.message_count) return null;
    const shared = this.ownerAt(session, position - 1);
    const owners = [];
    for (const t of this.sessions) {
      if (t.message_count <= position || this.ownerAt(t, position - 1) !== shared) continue;
      const owner = this.ownerAt(t, position);
      if (owner !== null && !owners.includes(owner)) owners.push(owner);
    }
    if (owners.length < 2) return null;
    const numbered = owners.map((owner) => {
      const s = this.byId.get(owner);
      const found = s && s.fork_seq === position ? BRANCH_NUMBER.exec(String(s.metadata?.branch ?? "")) : null;
      return { owner, number: found ? Number(found[1]) : null };
    });
    const taken = new Set(numbered.map((a) => a.number).filter((n) => n !== null));
    let next = 1;
    for (const a of numbered) {
      if (a.number !== null) continue;
      while (taken.has(next)) next++;
      a.number = next;
      taken.add(next);
    }
    return numbered.sort((a, b) => a.number - b.number);
  }

  label(session) {
    // "2 of 3 at #4": where a fork departs and which alternative it is there
    if (!session.parent_id || !(session.fork_seq > 0)) return null;
    const alternatives = this.alternativesAt(session, session.fork_seq);
    if (!alternatives) return `at #${session.fork_seq}`;
    const k = alternatives.findIndex((a) => a.owner === this.ownerAt(session, session.fork_seq));
    return `${k + 1} of ${alternatives.length} at #${session.fork_seq}`;
  }
}

async function goTo(sessionId, position) {
  // open sessionId at its message at `position` (one request for its id)
  let hash = `#/s/${enc(sessionId)}`;
  try {
    const { messages } = await api(`/v1/sessions/${enc(sessionId)}/messages?start=${position}&stop=${position + 1}&include_marked=true`);
    if (messages?.[0]?.id) hash += `?m=${enc(messages[0].id)}`;
  } catch { /* the session's start will do */ }
  location.hash = hash;
}

// Returns seq -> a "‹ 2/3 ›" switcher for the message at position seq of
// `session`, or null where the message has no alternative. session.js calls it
// for each message it renders.
export function branchSwitcher(session, lineage) {
  const tree = new Tree(lineage);
  const points = new Map();
  for (const position of tree.forkPoints) {
    const alternatives = tree.alternativesAt(session, position);
    if (alternatives) points.set(position, alternatives);
  }
  return (seq) => {
    const alternatives = points.get(seq);
    if (!alternatives) return null;
    const mine = tree.ownerAt(session, seq);
    const k = alternatives.findIndex((a) => a.owner === mine);
    const n = alternatives.length;
    const target = (i) => (alternatives[i].owner === mine ? session.id : alternatives[i].owner);
    const step = (i, text, label) => {
      if (i < 0 || i >= n) {
        const off = h("span", "branch-step off", text);
        off.setAttribute("aria-hidden", "true");
        return off;
      }
      const link = anchor(`#/s/${enc(target(i))}`, "branch-step", text);
      link.setAttribute("aria-label", `${label}: alternative ${i + 1} of ${n}`);
      link.dataset.sessionId = target(i);
      link.addEventListener("click", (event) => {
        event.preventDefault();
        goTo(target(i), seq);
      });
      return link;
    };
    const box = h("span", "branch-switch", step(k - 1, "‹", "previous"),
      h("span", "branch-count", `${k + 1}/${n}`), step(k + 1, "›", "next"));
    box.title = `${n} alternatives at this message (branches)`;
    return box;
  };
}

export function branchPanel(session, lineage) {
  const panel = h("section", "panel branches", h("h2", null, "Branches"));
  const branchOf = session.metadata?.branch_of;
  if ((!Array.isArray(lineage) || lineage.length <= 1) && typeof branchOf === "string" && branchOf !== session.id) {
    // an import's branch that shares no message with the session it branches
    // off (ChatGPT: the first prompt edited), so it is not a fork of it
    const number = BRANCH_NUMBER.exec(String(session.metadata.branch ?? ""));
    panel.append(h("p", "branch-of",
      number ? `Alternative ${number[1]} of ${number[2]} at the first message, beside ` : "A branch of ",
      anchor(`#/s/${enc(branchOf)}`, null, "the main session"), " (they share no message)."));
    return panel;
  }
  if (!Array.isArray(lineage) || lineage.length <= 1) {
    panel.classList.add("empty");
    panel.append(h("p", "muted", "No other branches. A fork or an edited message makes one."));
    return panel;
  }
  const tree = new Tree(lineage);
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
  const untitled = []; // [session, the node its title goes in]
  const branchList = (nodes, depth) => {
    const ul = h("ul", depth ? null : "tree");
    for (const s of nodes) {
      const title = titleOf(s);
      const current = s.id === session.id;
      const name = h("span", "branch-title", title || s.id);
      if (!title) untitled.push([s, name]);
      const link = anchor(`#/s/${enc(s.id)}`, current ? "current" : null, name);
      const label = tree.label(s);
      if (label) link.append(h("span", "branch-label", ` · ${label}`));
      link.append(h("span", "session-id", ` ${s.id}`));
      if (current) link.setAttribute("aria-current", "page");
      const li = h("li", null, link, h("span", "muted", ` · ${fmt(s.message_count)} msgs`));
      li.dataset.sessionId = s.id;
      if (children.has(s.id) && depth < 50) li.append(branchList(children.get(s.id), depth + 1));
      ul.append(li);
    }
    return ul;
  };
  panel.append(branchList(roots, 0));
  if (untitled.length) fillTitles(tree, untitled);
  return panel;
}

// Untitled branches are called by their first user message, as the session
// page is (the Markdown stripped): read once for the root, whose first
// messages most forks share, and for a fork only when it departs before it.
const TITLE_READ = 20; // messages read to find the first user message
const TITLE_FETCHES = 20;

async function fillTitles(tree, untitled) {
  const reads = new Map();
  const firstUser = (id) => {
    if (!reads.has(id)) {
      if (reads.size >= TITLE_FETCHES) return Promise.resolve(null);
      reads.set(id, api(`/v1/sessions/${enc(id)}/messages?start=0&stop=${TITLE_READ}&include_marked=true`)
        .then(({ messages }) => {
          const k = messages.findIndex((m) => m.role === "user" && textOf(m));
          return k < 0 ? null : { title: textOf(messages[k], TITLE_LIMIT), position: k };
        }, () => null));
    }
    return reads.get(id);
  };
  for (const [s, node] of untitled) {
    const root = tree.byId.get(tree.ownerAt(s, 0)) || s;
    let found = await firstUser(root.id);
    if (found && tree.ownerAt(s, found.position) !== tree.ownerAt(root, found.position)) {
      found = await firstUser(s.id); // it departs before the root's first user message
    }
    if (found) node.textContent = found.title;
  }
}

export function infoPanel(session) {
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

