// Requests to the v1 API with the user's key, and the key dialog.

import { $ } from "./dom.js";

const KEY_NAME = "chathistory.key";

let apiKey = sessionStorage.getItem(KEY_NAME) || localStorage.getItem(KEY_NAME) || "";

// who the server says we are (GET /v1/me, read by router.start before each
// route): the tenant, and the key's id (null in open mode, where no key is used)
export const me = { tenant: null, keyId: null };

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

export function authHeaders() {
  return apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
}

export async function request(path) {
  let res;
  try {
    res = await fetch(path, { headers: authHeaders(), credentials: "omit", cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, `the server did not answer (${err.message})`);
  }
  if (res.ok) return res;
  let message = `${res.status} ${res.statusText}`;
  let field;
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      field = body.error.path;
    }
  } catch { /* not JSON */ }
  if (res.status === 401 && !apiKey) askForKey("This server needs an API key.");
  else if (res.status === 401 || res.status === 403) askForKey(`Refused: ${message}`, true);
  throw new ApiError(res.status, message, field);
}

export async function api(path) {
  return (await request(path)).json();
}

export const blobUrls = new Map();

export async function assetUrl(attachment) {
  if (attachment.data) { // inline bytes (base64) that were never moved to the asset store
    return `data:${attachment.mime_type || "application/octet-stream"};base64,${attachment.data}`;
  }
  const sha = String(attachment.sha256 || "");
  if (!/^[0-9a-f]{64}$/.test(sha)) throw new ApiError(0, "attachment without a content hash");
  if (!blobUrls.has(sha)) {
    blobUrls.set(sha, request(`/v1/assets/${sha}`)
      .then((res) => res.blob())
      .then((blob) => URL.createObjectURL(blob)));
  }
  return blobUrls.get(sha);
}

// ------------------------------------------------------------------ key dialog

// The dialog says why it opened (a refusal is shown in it as an error, so that
// on a phone, where it covers most of the page, the reason is still in view)
// and, in its markup, how to get a key and what a key sees.
export function askForKey(reason, refused = false) {
  const dialog = $("key-dialog");
  const said = $("key-reason");
  said.textContent = reason || "Paste an API key for this server.";
  said.classList.toggle("error", refused);
  $("key-input").value = "";
  if (!dialog.open) dialog.showModal();
  $("key-input").focus();
}

export function setupKeyDialog(onChange) {
  $("key-button").addEventListener("click", () => askForKey());
  $("key-form").addEventListener("submit", () => {
    apiKey = $("key-input").value.trim();
    sessionStorage.removeItem(KEY_NAME);
    localStorage.removeItem(KEY_NAME);
    if (apiKey) ($("key-remember").checked ? localStorage : sessionStorage).setItem(KEY_NAME, apiKey);
    blobUrls.clear();
    onChange();
  });
  $("key-clear").addEventListener("click", () => {
    apiKey = "";
    sessionStorage.removeItem(KEY_NAME);
    localStorage.removeItem(KEY_NAME);
    $("key-dialog").close();
    onChange();
  });
  $("lightbox").addEventListener("click", () => { $("lightbox").hidden = true; });
}

