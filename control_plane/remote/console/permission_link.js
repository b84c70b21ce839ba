// A permission opened from a link (a webhook's: #/s/<session>?permission=<request id>):
// the page lands on that request. While it waits, its card is highlighted, scrolled to and
// its first button focused; once decided, the page says how ("answered: allow by phone").
// The request id is the store's (permission_requests.id), which is also the JSON-RPC id of
// the session/request_permission the server sends: the two are matched directly.

import { apiAnswer } from "./api.js";
import { ago, el, fill } from "./dom.js";

function highlight(node) {
  node.classList.add("target");
  node.scrollIntoView({ block: "center" });
  const first = node.querySelector("button:not([disabled])");
  if (first) first.focus();
  else node.focus();
}

function describe(found) {
  if (found.state === "answered") {
    return `answered: ${found.optionId ?? "cancelled"} by ${found.decidedBy}`;
  }
  if (found.state === "withdrawn") {
    return "withdrawn: nobody answered before the turn was cancelled, the wait timed out or the server stopped";
  }
  return "waiting for an answer";
}

export function landOnPermission({ sessionId, requestId, box, readOnly }) {
  const card = el("div", { class: "card permission-link target", id: "permission-link", role: "status", tabindex: "-1", "data-request": requestId },
    "Looking up the permission request…");
  box.prepend(card);
  let dialog = null;
  let timer = null;
  let stopped = false;
  const path = `/api/sessions/${encodeURIComponent(sessionId)}/permissions/${encodeURIComponent(requestId)}`;

  const check = async () => {
    clearTimeout(timer);
    if (stopped) return;
    let answer;
    try {
      answer = await apiAnswer(path);
    } catch (error) {
      card.textContent = `Could not look up the permission request: ${error.message}`;
      return;
    }
    const { status, body } = answer;
    if (stopped || dialog) return;
    if (status !== 200) {
      fill(card, el("strong", {}, "Permission request not found"), el("div", { class: "muted" }, body.error || `HTTP ${status}`));
    } else if (body.state === "pending") {
      fill(card, el("strong", {}, "Permission requested"),
        el("div", { class: "muted" }, readOnly ? "Pending: this token is watch-only and cannot answer it." : "Pending: waiting for the request…"));
      timer = setTimeout(check, 1000); // it comes with the session's stream; or is answered meanwhile
      return;
    } else {
      fill(card, el("strong", {}, "Permission request"),
        el("div", { class: "outcome", id: "permission-outcome" }, describe(body)),
        body.decidedAt ? el("div", { class: "muted" }, ago(body.decidedAt)) : null);
    }
    card.scrollIntoView({ block: "center" });
    card.focus();
  };
  check();

  return {
    // A permission dialog was shown: the one linked to is highlighted in place of the card.
    arrived(id, node) {
      if (id !== requestId) return;
      clearTimeout(timer);
      dialog = node;
      card.remove();
      highlight(node);
    },
    // The linked request was answered (here or elsewhere) or withdrawn: say how.
    settled(id) {
      if (id !== requestId || stopped) return;
      dialog = null;
      card.textContent = "Answered; looking up how…";
      box.prepend(card);
      timer = setTimeout(check, 300);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
