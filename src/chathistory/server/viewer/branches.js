// The side panels: branches of the session's tree and the session's facts.

import { anchor, details, enc, fact, fmt, h, pretty, titleOf } from "./dom.js";

export function forkDivider(session) {
  return h("li", "fork-divider", "▲ shared with ",
    anchor(`#/s/${enc(session.parent_id)}`, null, session.parent_id),
    ` · this branch starts at #${session.fork_seq} ▼`);
}

export function branchPanel(session, lineage) {
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

