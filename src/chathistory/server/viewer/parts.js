// A message's parts: text (Markdown), images, audio, files, tool calls with
// their results, reasoning, provider compactions.

import { assetUrl } from "./api.js";
import { codeBlock, preformatted, renderMarkdown, safeUrl } from "./markdown.js";
import { canHighlight } from "./syntax.js";
import { $, anchor, button, bytes, details, fileName, fmt, h, pretty } from "./dom.js";

export class PartRenderer {
  constructor() {
    this.calls = new Map(); // call id -> {box, result slot, state, name}
  }

  render(part) {
    switch (part.type) {
      case "text":
        return renderMarkdown(part.text);
      case "image":
        return imagePart(part);
      case "audio":
        return audioPart(part);
      case "file":
        return filePart(part);
      case "tool_call":
        return this.toolCall(part);
      case "tool_result":
        return this.toolResult(part);
      case "reasoning":
        return reasoningPart(part);
      case "compaction":
        return compactionPart(part);
      default:
        return details(`${part.type} part`, "unknown-part", h("pre", "json", pretty(part)));
    }
  }

  // A call is a card holding its arguments and, once its result comes, the
  // result: each result is shown once, there. The tool message that carries
  // the result shows a line that goes to the card. Every card is a
  // details.tool-call, which "expand tools and reasoning" opens.
  toolCall(part) {
    const result = h("div", "tool-result-slot", h("p", "pending", "No result yet."));
    const state = h("span", "badge call-state pending", "pending");
    const code = codeOf(part);
    const summary = h("summary", null, h("span", "tool-icon", "⚙"), h("span", "tool-name", part.name),
      h("span", "tool-args-preview", code ? firstLine(code.text) : argsPreview(part.arguments)), state);
    const box = h("details", "tool-call", summary,
      h("div", "tool-section", h("div", "label", code ? "Code" : "Arguments"),
        code ? codeBlock(code.text, code.lang) : codeBlock(pretty(part.arguments ?? {}), "json")),
      h("div", "tool-section", h("div", "label", "Result"), result),
      h("div", "tool-id", `call ${part.id}`));
    box.dataset.callId = part.id;
    this.calls.set(part.id, { box, result, state, name: part.name });
    return box;
  }

  toolResult(part) {
    const call = this.calls.get(part.call_id);
    if (call) {
      const outcome = part.is_error ? "error" : "done";
      call.result.replaceChildren(resultContent(part));
      call.state.textContent = outcome;
      call.state.className = `badge call-state ${outcome}`;
      if (part.is_error) call.box.classList.add("failed");
      const jump = button(`↑ result of ${call.name}${part.is_error ? " (error)" : ""}`, "jump", () => {
        call.box.open = true;
        call.box.scrollIntoView({ block: "center", behavior: "smooth" });
      });
      jump.title = "The result is shown with its call";
      return h("div", `tool-result-ref ${outcome}`, jump, h("span", "muted", " shown with the call"));
    }
    // a result whose call is not on the page: a card of its own
    const state = h("span", `badge call-state ${part.is_error ? "error" : "done"}`, part.is_error ? "error" : "done");
    const box = h("details", `tool-call orphan${part.is_error ? " failed" : ""}`,
      h("summary", null, h("span", "tool-icon", "⚙"), h("span", "tool-name", part.name || "an unknown call"),
        h("span", "tool-args-preview", "result without its call"), state),
      h("div", "tool-section", h("div", "label", "Result"), resultContent(part)),
      h("div", "tool-id", `no call ${part.call_id} before this message`));
    box.dataset.callId = part.call_id;
    return box;
  }

}

export function argsPreview(args) {
  let text = "";
  try {
    text = JSON.stringify(args ?? {});
  } catch { /* leave empty */ }
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}

function firstLine(text) {
  const line = text.split("\n").find((l) => l.trim()) || "";
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}

// A code-interpreter call: arguments that are a string of code, or {"code":
// "..."} (with an optional "language"), as ChatGPT's python tool and OpenAI's
// code interpreter send them; shown as code, not as escaped JSON. The language
// is the one named, else the tool's name when it names one (python), else
// python.
export function codeOf(part) {
  const args = part.arguments;
  let text = null;
  let named = null;
  if (typeof args === "string") {
    text = args;
  } else if (args && typeof args === "object" && !Array.isArray(args) && typeof args.code === "string") {
    const keys = Object.keys(args).filter((k) => k !== "code");
    if (keys.length === 0 || (keys.length === 1 && typeof args.language === "string")) {
      text = args.code;
      named = args.language || null;
    }
  }
  if (text === null) return null;
  const lang = [named, part.name].find((l) => l && l !== "unknown" && canHighlight("", l)) || "python";
  return { text, lang };
}

export function resultContent(part) {
  const content = part.content;
  if (typeof content === "string") return textBlock(content);
  const box = h("div", "result-parts");
  for (const item of content || []) {
    if (item.type === "text") box.append(textBlock(item.text));
    else if (item.type === "image") box.append(imagePart(item));
    else if (item.type === "file") box.append(filePart(item));
    else if (item.type === "audio") box.append(audioPart(item));
    else box.append(h("pre", "json", pretty(item)));
  }
  return box;
}

export function textBlock(text) {
  const trimmed = String(text ?? "").trim();
  if (/^[[{]/.test(trimmed)) {
    try {
      return codeBlock(pretty(JSON.parse(trimmed)), "json");
    } catch { /* not JSON */ }
  }
  return preformatted(h("pre", "plain"), String(text ?? ""));
}

export function reasoningPart(part) {
  const text = part.text || "";
  const label = text ? `Reasoning (${fmt(text.length)} characters)` : "Reasoning (encrypted, kept for the provider)";
  const box = details(label, "reasoning");
  if (text) box.append(renderMarkdown(text));
  else box.append(h("p", "muted", part.signature ? "signed reasoning without text" : "no readable text"));
  return box;
}

// The providers whose compactions chathistory decodes, by the format that wrote them.
const PROVIDERS = { openai_responses: "OpenAI Responses", anthropic: "Anthropic" };

export function providerName(provider) {
  return Object.hasOwn(PROVIDERS, provider) ? PROVIDERS[provider] : String(provider || "an unknown provider");
}

// A provider's compaction: what it reads instead of everything before it. Its
// summary when it gave one (Anthropic), else the size of what only it can read
// (OpenAI's is encrypted); a failed one has neither.
export function compactionPart(part) {
  const name = providerName(part.provider);
  const box = h("div", "compaction", h("div", "compaction-head", h("span", "compaction-icon"),
    h("span", "compaction-title", "Compaction"), h("span", "badge compaction-provider", name)));
  if (!part.text && typeof part.data !== "string") {
    box.append(h("p", "compaction-opaque muted", "no summary and no data (the provider's compaction gave none)"));
    return box;
  }
  if (part.text) box.append(h("div", "label", "Summary"), renderMarkdown(part.text));
  else box.append(h("p", "compaction-opaque muted", `opaque compaction data, ${fmt(utf8Length(part.data))} bytes`));
  box.append(h("p", "compaction-note muted", `${name} reads this instead of the messages before it.`));
  return box;
}

// The line in a session's timeline above a message that holds a compaction.
export function compactionDivider(part) {
  return h("li", "compaction-divider", h("span", "compaction-divider-label", "compacted here"),
    h("span", "muted", ` · ${providerName(part.provider)} reads from here on`));
}

function utf8Length(text) {
  return new TextEncoder().encode(text).length;
}

export function imagePart(part) {
  const figure = h("figure", "image");
  const img = h("img");
  img.alt = part.attachment?.name || "image";
  img.loading = "lazy";
  const width = part.width || part.attachment?.width;
  const height = part.height || part.attachment?.height;
  if (width && height) {
    img.width = width;
    img.height = height;
  }
  const caption = h("figcaption", null, fileName(part));
  if (width && height) caption.append(` · ${width}×${height}`);
  if (part.attachment) {
    if (part.attachment.size) caption.append(` · ${bytes(part.attachment.size)}`);
    assetUrl(part.attachment).then((url) => { img.src = url; },
      (err) => { figure.replaceChildren(h("div", "error", `image not available: ${err.message}`), caption); });
  } else if (part.url && part.url.startsWith("data:image/")) {
    img.src = part.url;
  } else {
    const href = safeUrl(part.url);
    if (!href) return missingImage(part);
    const link = anchor(href, "external", `external image: ${part.url}`);
    link.target = "_blank";
    link.rel = "noopener noreferrer nofollow";
    figure.append(link);
    return figure;
  }
  img.addEventListener("click", () => {
    $("lightbox-img").src = img.src;
    $("lightbox").hidden = false;
  });
  figure.append(img, caption);
  return figure;
}

// Schemes of references to files that stayed with the service that made the
// export (ChatGPT's conversations.json names its files this way).
const EXPORT_POINTER = /^(?:file-service|sediment):/i;

function missingImage(part) {
  // an image the store does not hold: no name, no bytes, no URL to fetch
  const url = String(part.url || "");
  const why = EXPORT_POINTER.test(url) ? "not included in the export" : "not stored here";
  const facts = [part.width && part.height ? `${part.width}×${part.height}` : null, part.mime_type, url || null]
    .filter(Boolean).join(" · ");
  const figure = h("figure", "image missing",
    h("div", "image-missing-box", h("span", "image-icon"), h("span", "image-label", "Image"),
      h("span", "muted", ` (${why})`)),
    facts ? h("figcaption", null, facts) : null);
  figure.title = url;
  return figure;
}

export function audioPart(part) {
  const box = h("div", "audio");
  const audio = h("audio");
  audio.controls = true;
  if (part.attachment) assetUrl(part.attachment).then((url) => { audio.src = url; }, () => {});
  else if (part.url && part.url.startsWith("data:audio/")) audio.src = part.url;
  box.append(audio, h("div", "caption", fileName(part)));
  if (part.transcript) box.append(h("blockquote", "transcript", part.transcript));
  return box;
}

export function filePart(part) {
  const name = fileName(part);
  const info = [part.attachment?.mime_type || part.mime_type, part.attachment ? bytes(part.attachment.size) : null]
    .filter(Boolean).join(", ");
  if (!part.attachment) {
    const href = safeUrl(part.url);
    if (href) {
      const a = anchor(href, "file-link", `⤓ ${name}`);
      a.target = "_blank";
      a.rel = "noopener noreferrer nofollow";
      return h("div", "file", a, info ? h("span", "muted", ` ${info}`) : null);
    }
    return h("div", "file", h("span", "file-link", `⤓ ${name}`), part.url ? h("span", "muted", ` ${part.url}`) : null);
  }
  const link = button(`⤓ ${name}`, "file-link", async () => {
    try {
      const url = await assetUrl(part.attachment);
      const a = h("a");
      a.href = url;
      a.download = String(name).replace(/[\\/:*?"<>|\u0000-\u001f]/g, "_") || "attachment";
      document.body.append(a);
      a.click();
      a.remove();
    } catch (err) {
      link.textContent = `⤓ ${name} (not available: ${err.message})`;
    }
  });
  return h("div", "file", link, info ? h("span", "muted", ` ${info}`) : null);
}

