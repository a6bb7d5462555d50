// Hash routes: #/ (the session list, with its filters), #/search (message
// search) and #/s/ID (a session).

import { api, me } from "./api.js";
import { $, nav } from "./dom.js";
import { showList } from "./list.js";
import { showSearch } from "./search.js";
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
  } else if (path === "/search") {
    showSearch(params, main, nav.generation);
  } else {
    showList(params, main, nav.generation);
  }
}

export async function start() {
  $("tenant").textContent = "";
  me.tenant = me.keyId = null;
  try {
    const found = await api("/v1/me");
    me.tenant = found.tenant;
    me.keyId = found.key_id || null;
    $("tenant").textContent = `tenant ${found.tenant}`;
    $("tenant").title = found.key_id ? `key ${found.key_id}` : "no key (loopback, open mode)";
  } catch {
    /* no tenant shown: a 401/403 has opened the key dialog; other errors show on the page */
  }
  route();
}

