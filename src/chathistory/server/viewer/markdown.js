// A small Markdown renderer that builds DOM nodes and never parses HTML.
//
// Message text reaches the page only through text nodes (createTextNode /
// textContent), so nothing in a message can run script: raw HTML shows as
// the characters it is made of. Links keep only http(s) and mailto URLs;
// images in Markdown become links (the viewer loads no remote content).
// Covered: fenced and indented-free code blocks, headings, lists (nested),
// block quotes, rules, GitHub tables, code spans, bold, italic, strikethrough,
// links, autolinks and bare URLs. A newline inside a paragraph is a line break,
// as chat text means it.

const BIG = 200_000; // characters past which a text is shown as plain preformatted text

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function safeUrl(raw) {
  const text = String(raw || "").trim();
  if (!text || /[\u0000-\u001f\u007f]/.test(text)) return null;
  let url;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
}

function link(href, children) {
  const a = document.createElement("a");
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer nofollow";
  a.referrerPolicy = "no-referrer";
  for (const c of children) a.append(c);
  return a;
}

// ------------------------------------------------------------------ inline

const RE = {
  escape: /\\([!-/:-@[-`{-~])/y,
  code: /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/y,
  strong: /(\*\*|__)(?=\S)([\s\S]*?\S)\1/y,
  strike: /~~(?=\S)([\s\S]*?\S)~~/y,
  em: /([*_])(?=\S)([\s\S]*?[^\s\\])\1(?![*_])/y,
  autolink: /<((?:https?:\/\/|mailto:)[^\s<>]+)>/y,
  bare: /https?:\/\/[^\s<>"]+/y,
  linkTail: /\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"]*")?\s*\)/y,
};

function at(re, s, i) {
  re.lastIndex = i;
  return re.exec(s);
}

function closingBracket(s, i) {
  // s[i] === "[": the index of its matching "]", or -1
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    const c = s[j];
    if (c === "\\") { j++; continue; }
    if (c === "`") {
      const m = at(RE.code, s, j);
      if (m) { j += m[0].length - 1; continue; }
    }
    if (c === "[") depth++;
    else if (c === "]" && --depth === 0) return j;
  }
  return -1;
}

function trimUrl(url) {
  // a bare URL ends before trailing punctuation and unbalanced closing parens
  let end = url.length;
  while (end > 0) {
    const c = url[end - 1];
    if (".,:;!?'\"*_~".includes(c)) { end--; continue; }
    if (c === ")") {
      const body = url.slice(0, end);
      if ((body.match(/\(/g) || []).length < (body.match(/\)/g) || []).length) { end--; continue; }
    }
    break;
  }
  return url.slice(0, end);
}

export function inline(s, out) {
  out = out || [];
  let buf = "";
  const flush = () => {
    if (buf) out.push(document.createTextNode(buf));
    buf = "";
  };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    let m;
    if (c === "\\") {
      if ((m = at(RE.escape, s, i))) { buf += m[1]; i += 2; continue; }
      if (s[i + 1] === "\n") { flush(); out.push(el("br")); i += 2; continue; }
    } else if (c === "\n") {
      flush(); out.push(el("br")); i++; continue;
    } else if (c === "`") {
      if ((m = at(RE.code, s, i))) {
        flush();
        let body = m[2].replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(body)) body = body.slice(1, -1);
        out.push(el("code", "md-code", body));
        i += m[0].length; continue;
      }
      const ticks = at(/`+/y, s, i)[0]; // no closing run: the backticks are text
      buf += ticks;
      i += ticks.length;
      continue;
    } else if (c === "*" || c === "_") {
      const wordBefore = c === "_" && i > 0 && /[\p{L}\p{N}]/u.test(s[i - 1]);
      if (!wordBefore && (m = at(RE.strong, s, i))
          && !(c === "_" && /[\p{L}\p{N}]/u.test(s[i + m[0].length] || ""))) {
        flush();
        const node = el("strong");
        node.append(...inline(m[2]));
        out.push(node); i += m[0].length; continue;
      }
      if (!wordBefore && (m = at(RE.em, s, i))) {
        const after = s[i + m[0].length];
        if (!(c === "_" && after && /[\p{L}\p{N}]/u.test(after))) {
          flush();
          const node = el("em");
          node.append(...inline(m[2]));
          out.push(node); i += m[0].length; continue;
        }
      }
    } else if (c === "~") {
      if ((m = at(RE.strike, s, i))) {
        flush();
        const node = el("del");
        node.append(...inline(m[1]));
        out.push(node); i += m[0].length; continue;
      }
    } else if (c === "[" || (c === "!" && s[i + 1] === "[")) {
      const open = c === "!" ? i + 1 : i;
      const close = closingBracket(s, open);
      if (close > 0 && (m = at(RE.linkTail, s, close + 1))) {
        const label = s.slice(open + 1, close);
        const href = safeUrl(m[1]);
        flush();
        if (href) {
          const children = c === "!" ? [document.createTextNode(`image: ${label || href}`)]
            : inline(label);
          out.push(link(href, children));
        } else {
          out.push(document.createTextNode(s.slice(i, close + 1 + m[0].length)));
        }
        i = close + 1 + m[0].length; continue;
      }
    } else if (c === "<") {
      if ((m = at(RE.autolink, s, i))) {
        const href = safeUrl(m[1]);
        if (href) {
          flush(); out.push(link(href, [document.createTextNode(m[1])]));
          i += m[0].length; continue;
        }
      }
    } else if (c === "h" && (i === 0 || !/[\p{L}\p{N}]/u.test(s[i - 1]))) {
      if ((m = at(RE.bare, s, i))) {
        const text = trimUrl(m[0]);
        const href = safeUrl(text);
        if (href && text.length > 8) {
          flush(); out.push(link(href, [document.createTextNode(text)]));
          i += text.length; continue;
        }
      }
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

// ------------------------------------------------------------------ blocks

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

function indentOf(line) {
  return line.match(/^ */)[0].length;
}

function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  const out = [];
  let cur = "";
  for (let i = 0; i < row.length; i++) {
    if (row[i] === "\\" && row[i + 1] === "|") { cur += "|"; i++; continue; }
    if (row[i] === "|") { out.push(cur.trim()); cur = ""; continue; }
    cur += row[i];
  }
  out.push(cur.trim());
  return out;
}

function startsTable(line, next) {
  // a header row, then a rule of dashes: | --- | :---: |
  return line.includes("|") && next !== undefined && TABLE_RULE.test(next) && next.includes("-");
}

function startsBlock(line, next) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || /^ {0,3}([-*+]|1[.)])[ \t]+\S/.test(line)
    || startsTable(line, next);
}

function blocks(lines, out, depth) {
  let i = 0;
  const n = lines.length;
  while (i < n) {
    const line = lines[i];
    let m;
    if (!line.trim()) { i++; continue; }
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < n && !(lines[i].trim().startsWith(fence[0].repeat(fence.length))
                        && /^ {0,3}[`~]+\s*$/.test(lines[i]))) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end)
      out.append(codeBlock(body.join("\n"), m[2]));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = el(`h${Math.min(6, m[1].length + 2)}`, `md-h md-h${m[1].length}`);
      h.append(...inline(m[2] || ""));
      out.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) { out.append(el("hr")); i++; continue; }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < n && lines[i].trim() && (m = QUOTE.exec(lines[i]) || [null, lines[i]])) {
        body.push(m[1]);
        i++;
      }
      const q = el("blockquote");
      if (depth < 8) blocks(body, q, depth + 1);
      else q.textContent = body.join("\n");
      out.append(q);
      continue;
    }
    if ((m = ITEM.exec(line)) && ((m[3] || "").trim() || (i + 1 < n && lines[i + 1].trim()))) {
      i = list(lines, i, out, depth);
      continue;
    }
    if (startsTable(line, lines[i + 1])) {
      i = table(lines, i, out);
      continue;
    }
    const para = [line.trim()];
    i++;
    while (i < n && lines[i].trim() && !startsBlock(lines[i], lines[i + 1])) {
      para.push(lines[i].trim());
      i++;
    }
    const p = el("p");
    p.append(...inline(para.join("\n")));
    out.append(p);
  }
  return out;
}

function list(lines, i, out, depth) {
  const first = ITEM.exec(lines[i]);
  const base = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const items = [];
  let cur = null;
  let blank = false;
  const n = lines.length;
  while (i < n) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length <= base + 1 && /\d/.test(m[2]) === ordered) {
      cur = { lines: [m[3] || ""], pad: m[1].length + m[2].length + 1, loose: blank && cur !== null };
      items.push(cur);
      blank = false;
      i++;
      continue;
    }
    if (!line.trim()) { blank = true; cur.lines.push(""); i++; continue; }
    const ind = indentOf(line);
    if (ind > base) {
      cur.lines.push(line.slice(Math.min(ind, cur.pad)));
      if (blank) cur.loose = true;
      blank = false;
      i++;
      continue;
    }
    if (!blank && !startsBlock(line, lines[i + 1])) { cur.lines.push(line.trim()); i++; continue; }
    break;
  }
  const loose = items.some((it) => it.loose);
  for (const it of items) {
    const li = el("li");
    while (it.lines.length && !it.lines[it.lines.length - 1].trim()) it.lines.pop();
    if (depth < 8) blocks(it.lines, li, depth + 1);
    else li.textContent = it.lines.join("\n");
    if (!loose && li.firstChild && li.firstChild.tagName === "P") {
      const p = li.firstChild;
      p.replaceWith(...p.childNodes);
    }
    node.append(li);
  }
  out.append(node);
  return i;
}

function table(lines, i, out) {
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) =>
    c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : "");
  const wrap = el("div", "md-table");
  const t = el("table");
  const tr = el("tr");
  head.forEach((c, k) => {
    const th = el("th");
    if (align[k]) th.style.textAlign = align[k];
    th.append(...inline(c));
    tr.append(th);
  });
  t.append(el("thead"));
  t.firstChild.append(tr);
  const body = el("tbody");
  i += 2;
  while (i < lines.length && lines[i].trim() && lines[i].includes("|")) {
    const row = el("tr");
    cells(lines[i]).slice(0, Math.max(head.length, 1)).forEach((c, k) => {
      const td = el("td");
      if (align[k]) td.style.textAlign = align[k];
      td.append(...inline(c));
      row.append(td);
    });
    body.append(row);
    i++;
  }
  t.append(body);
  wrap.append(t);
  out.append(wrap);
  return i;
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
  const code = el("code", lang ? `lang-${lang.replace(/[^\w-]/g, "")}` : "", text);
  pre.append(code);
  wrap.append(bar, pre);
  return wrap;
}

export function renderMarkdown(text) {
  const root = el("div", "md");
  const source = String(text ?? "");
  if (source.length > BIG) {
    root.append(el("pre", "md-plain", source));
    return root;
  }
  blocks(source.replace(/\r\n?/g, "\n").replace(/\t/g, "    ").split("\n"), root, 0);
  return root;
}
