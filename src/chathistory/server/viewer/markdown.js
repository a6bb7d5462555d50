// Markdown for message text: markdown-it parses, this module builds the DOM.
//
// markdown-it (vendored beside this file: markdown-it.min.js, its LICENSE in
// markdown-it.LICENSE; see docs/viewer.md) is a maintained CommonMark parser;
// on cmark's pathological inputs its time grows linearly with the length of
// the text (bench/viewer.py), where the hand-written parser it replaces was
// quadratic (200,000 "[" took 30 s). It runs with raw HTML off (`<b>` is text) and every link, autolink, bare URL and
// image source must pass safeUrl (http, https, mailto) or it stays text.
// Its HTML output is never used: this module walks its token stream and makes
// each element with createElement and each piece of text with a text node, so
// the page never parses a string of a message as HTML. Images become links
// (the viewer loads no remote content); a newline inside a paragraph is a line
// break, as chat text means it; fenced and indented code become codeBlock(),
// highlighted by syntax.js when a language is named. plainText() reads a text
// as chathistory.titles.strip_markdown does on the server, for titles and
// previews.

import MarkdownIt from "./markdown-it.min.js";
import { highlightWhenSeen } from "./syntax.js";

// Bounds on the work one message may cost the page (the parse is linear, so
// these bound a second of work, they do not dodge a blow-up). Past BIG
// characters, or past ELEMENTS elements to make, or nested past the parser's
// maxNesting, a text is shown as it was written, in preformatted parts.
// bench/viewer.py measures each hostile input of tests/viewer/pathological.py
// at 1,000,000 characters: under a second from the call to the painted page.
export const BIG = 1_000_000;
export const ELEMENTS = 30_000; // about 0.2 s of Blink layout for table cells, the dearest
const NESTING = 20; // markdown-it's own bound for the CommonMark preset
// Inline elements nested deeper than this are flattened into their parent:
// "*a **a " x 5,000 is valid emphasis 10,000 levels deep, which Blink's style
// and layout would walk recursively. The text stays; only that styling goes.
const INLINE_DEPTH = 24;

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function safeUrl(raw) {
  const text = String(raw || "").trim();
  // the scheme first: a URL that cannot pass costs no exception (markdown-it
  // asks about every link-like piece of a message, hostile ones included)
  if (!/^(?:https?|mailto):/i.test(text) || /[\u0000-\u001f\u007f]/.test(text)) return null;
  let url;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
}

const md = new MarkdownIt("default", {
  html: false, // raw HTML is text (html_block / html_inline tokens are never made)
  linkify: true, // bare http(s) URLs and mailto: become links
  typographer: false, // quotes and dashes stay as written
  maxNesting: NESTING, // the inline parser's cost on "[[[[..." grows with it
});
md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false })
  .add("ftp:", null)
  .add("//", null);
// Called by markdown-it for links, autolinks, linkified URLs, reference
// definitions and images: anything else is not a link and stays text.
md.validateLink = (url) => safeUrl(url) !== null;

function link(href, children) {
  const a = document.createElement("a");
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer nofollow";
  a.referrerPolicy = "no-referrer";
  for (const c of children) a.append(c);
  return a;
}

// A preformatted text longer than this goes in parts of PART_LINES lines, each
// laid out by the browser only when near the viewport (content-visibility:
// auto): 500,000 short lines take a second of layout in one piece.
const PART_CHARS = 20_000;
const PART_LINES = 200;

export function preformatted(node, text) {
  // put text in node (a <pre> or <code>) as one text node, or in parts if long
  if (text.length <= PART_CHARS) {
    node.textContent = text;
    return node;
  }
  let start = 0;
  while (start < text.length) {
    let end = start;
    let lines = 0;
    while (end < text.length && lines < PART_LINES && end - start < PART_CHARS) {
      const newline = text.indexOf("\n", end);
      end = newline < 0 ? text.length : newline + 1;
      lines++;
    }
    const part = el("span", "md-part", text.slice(start, end));
    part.style.containIntrinsicBlockSize = `auto ${lines * 1.45}em`;
    node.append(part);
    start = end;
  }
  return node;
}

export function codeBlock(text, lang) {
  const wrap = el("div", "md-pre");
  const bar = el("div", "md-pre-bar");
  bar.append(el("span", "md-lang", lang || "text"));
  const copy = el("button", "md-copy", "copy");
  copy.type = "button";
  copy.addEventListener("click", () => {
    navigator.clipboard?.writeText(text).then(() => { copy.textContent = "copied"; },
      () => { copy.textContent = "copy failed"; });
  });
  bar.append(copy);
  const pre = el("pre");
  const code = preformatted(el("code", lang ? `lang-${lang.replace(/[^\w-]/g, "")}` : ""), text);
  pre.append(code);
  wrap.append(bar, pre);
  highlightWhenSeen(code, text, lang);
  return wrap;
}

const BLOCK_TAGS = new Set(["p", "blockquote", "ul", "ol", "li", "thead", "tbody", "tr", "th", "td"]);
const INLINE_TAGS = { strong: "strong", em: "em", s: "del" };
const ALIGN = /^text-align:(left|center|right)$/;

function blockElements(token) {
  // [the element to append, the element its content goes in] for a block *_open token
  const tag = token.tag;
  if (/^h[1-6]$/.test(tag)) {
    const level = Number(tag[1]);
    const h = el(`h${Math.min(6, level + 2)}`, `md-h md-h${level}`);
    return [h, h];
  }
  if (tag === "table") {
    const table = el("table");
    const wrap = el("div", "md-table");
    wrap.append(table);
    return [wrap, table];
  }
  const node = el(BLOCK_TAGS.has(tag) ? tag : "div");
  if (tag === "ol" && token.attrGet("start") !== null) node.start = Number(token.attrGet("start"));
  if (tag === "th" || tag === "td") {
    const align = ALIGN.exec(token.attrGet("style") || "");
    if (align) node.style.textAlign = align[1];
  }
  return [node, node];
}

function inlineInto(children, parent) {
  // one paragraph's (heading's, cell's) inline tokens, appended to parent;
  // adjacent text goes into one text node
  const stack = [parent];
  let top = parent;
  let text = "";
  let flattened = 0; // open tokens past INLINE_DEPTH, which made no element
  const put = (node) => {
    if (text) top.append(text);
    text = "";
    if (node) top.append(node);
  };
  for (const t of children) {
    if (t.nesting === 1) {
      if (stack.length > INLINE_DEPTH) { flattened++; continue; }
      let node;
      if (t.type === "link_open") {
        const href = safeUrl(t.attrGet("href")); // markdown-it checked it too (validateLink)
        node = href ? link(href, []) : el("span");
      } else {
        node = el(INLINE_TAGS[t.tag] || "span");
      }
      put(node);
      stack.push(node);
      top = node;
    } else if (t.nesting === -1) {
      if (flattened) { flattened--; continue; }
      put(null);
      if (stack.length > 1) stack.pop();
      top = stack[stack.length - 1];
    } else if (t.type === "softbreak" || t.type === "hardbreak") {
      put(el("br"));
    } else if (t.type === "code_inline") {
      put(el("code", "md-code", t.content));
    } else if (t.type === "image") {
      const href = safeUrl(t.attrGet("src"));
      const label = `image: ${t.content || href || ""}`;
      if (href) put(link(href, [document.createTextNode(label)]));
      else text += label;
    } else { // text, text_special, and anything unknown: its characters
      text += t.content;
    }
  }
  put(null);
}

function build(tokens, root) {
  // markdown-it's token stream is flat: *_open / *_close pairs around blocks
  const stack = [root];
  let top = root;
  for (const t of tokens) {
    if (t.nesting === 1) {
      if (t.hidden) { stack.push(top); continue; } // the <p> of a tight list item
      const [outer, inner] = blockElements(t);
      top.append(outer);
      stack.push(inner);
      top = inner;
    } else if (t.nesting === -1) {
      if (stack.length > 1) stack.pop();
      top = stack[stack.length - 1];
    } else if (t.type === "inline") {
      inlineInto(t.children || [], top);
    } else if (t.type === "fence" || t.type === "code_block") {
      const lang = (t.info || "").trim().split(/\s+/)[0];
      top.append(codeBlock(t.content.replace(/\n$/, ""), lang));
    } else if (t.type === "hr") {
      top.append(el("hr"));
    } else if (t.content) { // html_block cannot occur with html: false; text if it did
      top.append(el("p", null, t.content));
    }
  }
}

function elementCount(tokens) {
  // about how many elements build() makes (open tags, breaks, code, images)
  let n = 0;
  for (const t of tokens) {
    if (t.nesting === 1 || t.type === "fence" || t.type === "code_block" || t.type === "hr") n++;
    else if (t.type === "inline") for (const c of t.children || []) if (c.type !== "text" && c.nesting !== -1) n++;
  }
  return n;
}

function plain(root, source) {
  root.append(preformatted(el("pre", "md-plain"), source));
  return root;
}

export function renderMarkdown(text) {
  const root = el("div", "md");
  const source = String(text ?? "");
  if (source.length > BIG) return plain(root, source);
  const tokens = md.parse(source, {});
  // A container opened at level NESTING - 1 had its content parsed past
  // maxNesting, where markdown-it drops it: show all of the text instead.
  if (tokens.some((t) => t.nesting === 1 && t.level >= NESTING - 1)) return plain(root, source);
  if (elementCount(tokens) > ELEMENTS) return plain(root, source);
  build(tokens, root);
  return root;
}

// ---------------------------------------------------------------- plain text

// The rule of chathistory.titles (strip_markdown, truncate, plain_preview),
// so that the viewer and the CLI call a session the same: inline text and
// code kept, markup and backslash escapes gone, an image by its alt text,
// block boundaries as spaces, whitespace collapsed. Only a prefix of a long
// text is read: a title needs its first words.
const PARSE_FACTOR = 16;
const PARSE_MINIMUM = 2_000;
// Python's str.split() whitespace (JavaScript's \s differs: U+001C-U+001F, U+0085, U+FEFF)
const SPACES = /[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;
// the server's parser, configured as titles.py configures markdown-it-py (the
// page's own renderer above also turns bare URLs into links and keeps only
// http(s) and mailto links, which would change what a title's text is)
const plainMd = new MarkdownIt("commonmark").enable(["table", "strikethrough"])
  .disable(["html_inline", "html_block"]);

function inlinePlain(children, out) {
  for (const t of children) {
    if (t.type === "text" || t.type === "text_special" || t.type === "code_inline") out.push(t.content);
    else if (t.type === "softbreak" || t.type === "hardbreak") out.push(" ");
    else if (t.type === "image") inlinePlain(t.children || [], out);
  }
}

export function stripMarkdown(text) {
  const out = [];
  for (const t of plainMd.parse(String(text ?? ""), {})) {
    if (t.type === "inline") inlinePlain(t.children || [], out);
    else if (t.type === "fence" || t.type === "code_block") out.push(t.content);
    out.push(" ");
  }
  return collapseSpaces(out.join(""));
}

export function collapseSpaces(text) {
  // whitespace runs as one space, none at the ends (Python's " ".join(text.split()))
  return String(text).split(SPACES).filter(Boolean).join(" ");
}

export function truncate(text, limit) {
  // cut to at most `limit` characters (code points), ending in "…", on a word
  // boundary when one is in the last quarter
  if (text.length <= limit) return text;
  const chars = Array.from(text);
  if (chars.length <= limit) return text;
  let head = chars.slice(0, limit - 1);
  const space = head.lastIndexOf(" ");
  if (space >= Math.floor((limit * 3) / 4)) head = head.slice(0, space);
  return `${head.join("").replace(/ +$/, "")}…`;
}

export function plainText(text, limit) {
  // Markdown `text` as plain text cut to `limit`; "" when nothing is left
  const source = String(text ?? "");
  if (!source) return "";
  return truncate(stripMarkdown(source.slice(0, Math.max(limit * PARSE_FACTOR, PARSE_MINIMUM))), limit);
}
