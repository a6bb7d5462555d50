// The chathistory viewer: a session list and a session's timeline, context
// window and branches, read through the v1 API with the user's API key.
//
// Everything from the server is put on the page with text nodes or element
// properties (never innerHTML), and message text goes through markdown.js,
// which builds DOM nodes itself: no content of a message can run script.
//
// Modules: dom.js (DOM and text helpers), api.js (requests, the key dialog),
// router.js (hash routes), list.js (the session list and its search), search.js
// (message search), session.js
// (a session's page and its context window), parts.js (message parts),
// branches.js (the branch and session panels).

import { setupKeyDialog } from "./api.js";
import { route, start } from "./router.js";

setupKeyDialog(start);
window.addEventListener("hashchange", route);
start();
