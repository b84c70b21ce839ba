// The files a turn changed: the diff of the session's workspace checkpoint of that turn
// against the one before (GET /api/sessions/{id}/turns/{seq}/diff), one section per file.

import { apiAnswer } from "./api.js";
import { el, fill } from "./dom.js";
import { gitDiff } from "./diffs.js";

export async function turnDiffView(view, sessionId, seq) {
  const back = el("a", { href: `#/s/${encodeURIComponent(sessionId)}`, id: "back" }, "← the session");
  const body = el("div", { id: "turn-diff", "aria-live": "polite" }, el("p", { class: "muted" }, "Loading…"));
  fill(view, el("div", { class: "session-head" }, el("h1", {}, `Files changed in turn ${seq}`), back),
    el("p", { class: "muted id" }, sessionId), body);
  const { status, body: answer } = await apiAnswer(`/api/sessions/${encodeURIComponent(sessionId)}/turns/${encodeURIComponent(seq)}/diff`);
  if (status !== 200) {
    fill(body, el("p", { class: "error", role: "alert" }, answer.error || `HTTP ${status}`));
    return;
  }
  const files = gitDiff(answer.diff);
  fill(body,
    el("p", { class: "muted" }, `${answer.ref}: ${files.length} file${files.length === 1 ? "" : "s"} changed`),
    files.length ? files : el("p", { class: "muted" }, "This turn changed no file."),
    answer.truncated ? el("p", { class: "banner" }, "The diff is cut short here (over a million characters).") : null);
}
