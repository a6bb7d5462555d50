// Syntax highlighting of code blocks by highlight.js, without HTML strings.
//
// highlight.js 11.12.0 (vendored beside this file: highlight.min.js, npm's
// @highlightjs/cdn-assets es/highlight.min.js with its 36 common languages,
// unchanged; its BSD-3-Clause license in highlight.js.LICENSE; GitHub's light
// and dark themes in highlight-github*.min.css) tokenizes the code. Its
// highlight() also returns the result as an HTML string, which is never used:
// this module walks the token tree highlight.js built for that string (the
// emitter's `root`: strings and {scope, children} nodes) and makes a <span>
// per scope and a text node per piece of text. The pieces are checked to add
// up to the code, character for character, or the code stays plain text.
//
// Only a block whose language is named (a fence's info string, "json" for tool
// arguments and results, "python" for code-interpreter calls) and known to
// highlight.js is highlighted: no guessing, which runs every grammar. A block
// is highlighted when it first comes near the viewport, so a page of 200
// messages costs only what is read; past HIGHLIGHT_MAX characters it stays
// plain (highlight.js takes 1-4 us a character, linearly, on hostile input too).

import hljs from "./highlight.min.js";

export const HIGHLIGHT_MAX = 100_000;
const SPAN_DEPTH = 24; // scopes nested deeper add no span (Blink lays nesting out recursively)

export function canHighlight(text, lang) {
  return Boolean(lang) && text.length <= HIGHLIGHT_MAX && Boolean(hljs.getLanguage(lang));
}

function scopeClass(scope) {
  // highlight.js's own naming: "title.function" -> "hljs-title function_"
  if (scope.startsWith("language:")) return `language-${scope.slice(9)}`;
  const [first, ...rest] = scope.split(".");
  return [`hljs-${first}`, ...rest.map((piece, k) => `${piece}${"_".repeat(k + 1)}`)].join(" ");
}

export function highlightedNodes(text, lang) {
  // a fragment of spans and text nodes whose text is `text`, or null
  if (!canHighlight(text, lang)) return null;
  let result;
  try {
    result = hljs.highlight(text, { language: lang, ignoreIllegals: true });
  } catch {
    return null;
  }
  const root = result?._emitter?.root;
  if (!root || result.errorRaised || result.illegal || !Array.isArray(root.children)) return null;
  const fragment = document.createDocumentFragment();
  const pieces = [];
  // iterative: a grammar's modes can nest as deep as the code does
  const stack = [{ children: root.children, at: 0, parent: fragment, depth: 0 }];
  while (stack.length) {
    const top = stack[stack.length - 1];
    if (top.at >= top.children.length) { stack.pop(); continue; }
    const node = top.children[top.at++];
    if (typeof node === "string") {
      pieces.push(node);
      top.parent.append(document.createTextNode(node));
    } else if (node && Array.isArray(node.children)) {
      let parent = top.parent;
      if (typeof node.scope === "string" && node.scope && top.depth < SPAN_DEPTH) {
        parent = document.createElement("span");
        parent.className = scopeClass(node.scope);
        top.parent.append(parent);
      }
      stack.push({ children: node.children, at: 0, parent, depth: top.depth + (parent === top.parent ? 0 : 1) });
    }
  }
  return pieces.join("") === text ? fragment : null;
}

export function highlight(code, text, lang) {
  // put `text` highlighted into the <code> element `code`; false if it stays as it is
  const nodes = highlightedNodes(text, lang);
  if (!nodes) return false;
  code.replaceChildren(nodes);
  code.classList.add("hl");
  return true;
}

// Blocks waiting to come near the viewport. A block never shown (its page
// left before it was reached) is let go at the next look that finds it
// detached, so the observer keeps no old page alive.
const waiting = new Map(); // <code> -> [text, lang]
let observer = null;

function look(entries) {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    const job = waiting.get(entry.target);
    observer.unobserve(entry.target);
    waiting.delete(entry.target);
    if (job) highlight(entry.target, job[0], job[1]);
  }
  for (const code of waiting.keys()) {
    if (!code.isConnected) {
      observer.unobserve(code);
      waiting.delete(code);
    }
  }
}

export function highlightWhenSeen(code, text, lang) {
  // highlight the <code> element `code` (holding `text`) once it nears the viewport
  if (!canHighlight(text, lang)) return;
  if (typeof IntersectionObserver !== "function") {
    highlight(code, text, lang);
    return;
  }
  observer ??= new IntersectionObserver(look, { rootMargin: "600px 0px" });
  waiting.set(code, [text, lang]);
  observer.observe(code);
}
