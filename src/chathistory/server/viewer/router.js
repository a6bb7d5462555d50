// Hash routes: #/ (the session list, with its filters) and #/s/ID (a session).

import { api } from "./api.js";
import { $, nav } from "./dom.js";
import { showList } from "./list.js";
import { showSession } from "./session.js";

export function route() {
  const raw = location.hash.slice(1) || "/";
  const [path, query] = raw.split("?");
  const params = new URLSearchParams(query || "");
  nav.generation++;
  const main = $("main");
  main.replaceChildren();
  if (path.startsWith("/s/")) {
    showSession(decodeURIComponent(path.slice(3)), params, main, nav.generation);
  } else {
    showList(params, main, nav.generation);
  }
}

export async function start() {
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

