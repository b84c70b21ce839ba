// The acpctl console: one more client of `acpctl serve --listen`. Sessions stream over ACP on
// the WebSocket (session/load with the last position after a reconnect, so nothing shows
// twice); lists and status come from the read-only JSON API (/api/...). No framework, no
// build step: this file and the modules it imports are what the browser runs. Agent text is
// never put into the page as HTML: everything is built as DOM nodes with textContent.

import { api, auth, download, Unauthorized } from "./api.js";
import { ago, el, stateBadge } from "./dom.js";
import { toolDiff } from "./diffs.js";
import { landOnPermission } from "./permission_link.js";
import { sidePanel } from "./session_side.js";
import { turnDiffView } from "./turn_diff.js";

const view = document.getElementById("view");
const problem = document.getElementById("problem");
let me = null;
let cleanup = () => {};

function every(ms, fn) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    try {
      await fn();
      problem.hidden = true;
    } catch (error) {
      if (error instanceof Unauthorized) return logout("The token was refused.");
      console.error(error);
      problem.textContent = `Could not refresh: ${error.message}`;
      problem.hidden = false;
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// -- markdown, as DOM nodes ------------------------------------------------------------------

function inline(text) {
  const out = [];
  const pattern = /(`[^`]+`|\*\*[^*]+\*\*)/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) out.push(document.createTextNode(text.slice(last, match.index)));
    const token = match[0];
    out.push(token.startsWith("`") ? el("code", {}, token.slice(1, -1)) : el("strong", {}, token.slice(2, -2)));
    last = match.index + token.length;
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

function markdown(text) {
  const nodes = [];
  const parts = text.split(/^```[^\n]*\n?/m);
  parts.forEach((part, index) => {
    if (index % 2 === 1) {
      nodes.push(el("pre", {}, el("code", {}, part.replace(/\n$/, ""))));
      return;
    }
    for (const block of part.split(/\n{2,}/)) {
      if (!block.trim()) continue;
      const lines = block.split("\n");
      if (lines.every((line) => /^\s*([-*]|\d+\.)\s/.test(line))) {
        const ordered = /^\s*\d+\./.test(lines[0]);
        nodes.push(el(ordered ? "ol" : "ul", {}, lines.map((l) => el("li", {}, inline(l.replace(/^\s*([-*]|\d+\.)\s/, ""))))));
      } else if (/^#{1,6}\s/.test(block)) {
        nodes.push(el("p", {}, el("strong", {}, block.replace(/^#{1,6}\s/, ""))));
      } else {
        const p = el("p");
        lines.forEach((line, i) => {
          if (i) p.append(el("br"));
          p.append(...inline(line));
        });
        nodes.push(p);
      }
    }
  });
  return nodes;
}

// -- the conversation ------------------------------------------------------------------------

const PLAN_MARKS = { completed: "✓", in_progress: "▸", pending: "○" };

class Conversation {
  constructor(container) {
    this.container = container;
    this.last = null; // {kind, node, text}
    this.tools = new Map();
    this.pending = new Set(); // text blocks to render again
    this.incoming = []; // new blocks, appended at the next flush
    this.frame = null;
    this.planNode = null; // the running turn's plan card
  }

  atBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }

  // Everything reaches the page at most ten times a second, in one go: one layout read
  // (are we at the bottom?), then the writes. A stream of small chunks must not lay the
  // page out at every chunk (a phone's battery; the agent's CPU, if this is its machine).
  schedule() {
    if (!this.frame) this.frame = setTimeout(() => this.flush(), 100);
  }

  add(node) {
    this.incoming.push(node);
    this.schedule();
  }

  text(kind, text, extra = {}) {
    if (!this.last || this.last.kind !== kind) {
      let node;
      if (kind === "thought") {
        const body = el("div");
        node = el("details", { class: "thought" }, el("summary", {}, "Thinking"), body);
        node.body = body;
      } else {
        node = el("div", { class: `msg ${kind}`, "data-kind": kind });
        node.body = node;
      }
      this.last = { kind, node, text: "" };
      if (kind === "user") this.planNode = null; // a new turn: a new plan card
      this.add(node);
    }
    this.last.text += text;
    if (extra.interrupted) this.last.node.classList.add("interrupted");
    this.pending.add(this.last);
    this.schedule();
  }

  flush() {
    this.frame = null;
    const follow = this.atBottom();
    if (this.incoming.length) {
      this.container.append(...this.incoming);
      this.incoming = [];
    }
    for (const block of this.pending) {
      block.node.body.replaceChildren(...(block.kind === "agent" ? markdown(block.text) : [block.text]));
    }
    this.pending.clear();
    if (follow) window.scrollTo(0, document.body.scrollHeight);
  }

  tool(update) {
    let card = this.tools.get(update.toolCallId);
    if (!card) {
      card = el("div", { class: "msg tool", "data-tool": update.toolCallId });
      card.head = el("div", {}, el("span", { class: "title" }), " ", el("span", { class: "muted status" }));
      card.body = el("div");
      card.append(card.head, card.body);
      this.tools.set(update.toolCallId, card);
      this.last = null;
      this.add(card);
    }
    if (update.title) card.head.querySelector(".title").textContent = update.title;
    if (update.status) {
      card.className = `msg tool ${update.status}`;
      card.head.querySelector(".status").textContent = update.status.replace("_", " ");
    }
    if (Array.isArray(update.content)) {
      card.body.replaceChildren(...update.content.map((item) => this.toolContent(item)));
    }
  }

  toolContent(item) {
    if (item.type === "diff") return toolDiff(item);
    if (item.type === "content" && item.content && item.content.type === "text") {
      return el("pre", {}, item.content.text);
    }
    return el("div", { class: "muted" }, item.type || "content");
  }

  // A plan update is the whole plan: the turn's plan card is drawn again in place, where
  // the turn's first plan appeared (a new turn starts a new card).
  plan(update) {
    const entries = update.entries || [];
    const done = entries.filter((e) => e.status === "completed").length;
    const list = el("ol", {}, entries.map((entry) =>
      el("li", { class: entry.status, "data-status": entry.status, "data-priority": entry.priority },
        el("span", { class: "mark", "aria-hidden": "true" }, PLAN_MARKS[entry.status] || "○"),
        el("span", { class: "entry" }, entry.content || ""),
        el("span", { class: "visually-hidden" }, ` (${(entry.status || "pending").replace("_", " ")})`),
        entry.priority ? el("span", { class: `priority ${entry.priority}` }, entry.priority) : null)));
    const head = el("div", { class: "plan-head" }, el("strong", {}, "Plan"), " ",
      el("span", { class: "muted progress" }, `${done} of ${entries.length} done`));
    if (!this.planNode) {
      this.planNode = el("div", { class: "msg plan", role: "group", "aria-label": "Plan" });
      this.last = null;
      this.add(this.planNode);
    }
    this.planNode.replaceChildren(head, list);
  }

  stop(reason) {
    this.last = null;
    this.planNode = null;
    this.add(el("div", { class: "stop" }, `— ${reason} —`));
  }

  update(update) {
    const content = update.content || {};
    switch (update.sessionUpdate) {
      case "user_message_chunk":
        return this.text("user", content.text ?? `[${content.type}]`);
      case "agent_message_chunk": {
        const interrupted = update._meta && update._meta.acpctl && update._meta.acpctl.interrupted;
        return this.text("agent", content.text ?? `[${content.type}]`, { interrupted });
      }
      case "agent_thought_chunk":
        return this.text("thought", content.text ?? "");
      case "tool_call":
      case "tool_call_update":
        return this.tool(update);
      case "plan":
        return this.plan(update);
      default:
        return undefined; // modes, commands, usage: not part of the conversation view
    }
  }
}

// -- one session over ACP --------------------------------------------------------------------

class SessionStream {
  constructor(session, handlers) {
    this.session = session;
    this.handlers = handlers;
    this.position = 0;
    this.ids = 0;
    this.waiting = new Map();
    this.prompts = new Map(); // idempotency key -> text, until answered
    this.closed = false;
    this.backoff = 500;
    this.connect();
  }

  connect() {
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/acp`;
    this.ws = new WebSocket(url, ["acp", `acpctl.bearer.${auth.token}`]);
    this.ws.onmessage = (event) => this.received(JSON.parse(event.data));
    this.ws.onopen = () => this.opened();
    this.ws.onclose = () => this.dropped();
  }

  async opened() {
    this.backoff = 500;
    await this.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
    const answer = await this.request("session/load", {
      sessionId: this.session.id,
      cwd: this.session.cwd,
      mcpServers: [],
      _meta: { acpctl: { after: this.position } },
    });
    if (answer.error) return this.handlers.status(`refused: ${answer.error.message}`);
    const reached = answer.result && answer.result._meta && answer.result._meta.acpctl;
    if (reached && reached.position > this.position) this.position = reached.position;
    this.handlers.status("live");
    for (const [key, text] of this.prompts) this.sendPrompt(text, key);
  }

  dropped() {
    for (const waiter of this.waiting.values()) waiter({ error: { message: "disconnected" } });
    this.waiting.clear();
    if (this.closed) return;
    this.handlers.status("reconnecting…");
    setTimeout(() => !this.closed && this.connect(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, 5000);
  }

  close() {
    this.closed = true;
    this.ws.close();
  }

  received(message) {
    if (!("method" in message)) {
      const waiter = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      if (waiter) waiter(message);
      return;
    }
    const params = message.params || {};
    if (message.method === "session/update") {
      const position = params._meta && params._meta.acpctl && params._meta.acpctl.position;
      if (typeof position === "number") {
        if (position < this.position) return; // seen before a reconnect
        this.position = position;
      }
      this.handlers.update(params.update || {});
    } else if (message.method === "session/request_permission") {
      this.handlers.permission(message);
    } else if (message.method === "$/cancel_request") {
      // _meta.acpctl: how it was settled ({settled: {state, optionId, decidedBy}}), or why
      // this page's own answer did not count ({reason: "already_answered"}).
      this.handlers.withdrawn(params.requestId, (params._meta && params._meta.acpctl) || {});
    }
  }

  request(method, params) {
    const id = ++this.ids;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  notify(method, params) {
    this.ws.send(JSON.stringify({ jsonrpc: "2.0", method, params }));
  }

  prompt(text) {
    const key = `console-${crypto.randomUUID()}`;
    this.prompts.set(key, text);
    this.handlers.sent(text);
    this.sendPrompt(text, key);
  }

  async sendPrompt(text, key) {
    const answer = await this.request("session/prompt", {
      sessionId: this.session.id,
      prompt: [{ type: "text", text }],
      _meta: { idempotencyKey: key },
    });
    if (answer.error && answer.error.message === "disconnected") return; // sent again
    this.prompts.delete(key);
    this.handlers.answered(answer, text);
  }

  answer(request, optionId) {
    this.ws.send(JSON.stringify({
      jsonrpc: "2.0",
      id: request.id,
      result: { outcome: { outcome: "selected", optionId } },
    }));
  }
}

// -- views -----------------------------------------------------------------------------------

function showLogin(message = "") {
  cleanup();
  cleanup = () => {};
  document.getElementById("who").textContent = "";
  document.getElementById("logout").hidden = true;
  const form = document.getElementById("login-template").content.cloneNode(true).firstElementChild;
  view.replaceChildren(form);
  form.querySelector("#login-error").textContent = message;
  form.querySelector("#token").focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    auth.token = form.querySelector("#token").value.trim();
    try {
      me = await api("/api/me");
    } catch {
      auth.token = null;
      form.querySelector("#login-error").textContent = "That token was refused.";
      return;
    }
    auth.keep(auth.token);
    route(); // the same address as before the login: a deep link survives it
  });
}

function logout(message = "") {
  auth.forget();
  me = null;
  showLogin(message);
}

const PAGE = 50;

function sessionRow(s) {
  const name = el("a", { href: `#/s/${s.id}` }, s.title || s.key || s.id.slice(0, 8));
  const said = s.match ? el("div", { class: "match muted", title: `${s.match.role} said` }, s.match.snippet) : "";
  return el("tr", { "data-session": s.id },
    el("td", {}, stateBadge(s.state)),
    el("td", { class: "id wide" }, name, said),
    el("td", { class: "hide-narrow" }, s.agent),
    el("td", { class: "id hide-narrow" }, s.cwd),
    el("td", {}, s.runningTurn ? "running" : "", s.queued ? ` +${s.queued} queued` : ""),
    el("td", { class: "hide-narrow" }, s.usage.tokens ? `${s.usage.tokens} tok` : ""),
    el("td", {}, ago(s.updatedAt)));
}

// The list pages on the server (newest updated first; with a search, newest match first):
// "More" follows the cursor; the refresh re-reads as many pages as are shown.
function sessionsView() {
  const state = el("select", { "aria-label": "State" },
    ["", "creating", "idle", "running", "cancelling", "error", "closed"].map((s) =>
      el("option", { value: s }, s || "any state")));
  const search = el("input", { type: "search", placeholder: "Search what was said, or an id", "aria-label": "Search" });
  const body = el("tbody");
  const more = el("button", { class: "quiet", hidden: true }, "More");
  const table = el("table", { class: "sessions" },
    el("thead", {}, el("tr", {}, ["State", "Session", "Agent", "Directory", "Turn", "Usage", "Activity"].map((h) => el("th", {}, h)))),
    body);
  view.replaceChildren(el("h1", {}, "Sessions"), el("div", { class: "filters" }, state, search), el("div", { class: "card" }, table), more);
  let pages = 1;
  let generation = 0;
  const page = async (cursor) => {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (state.value) query.set("state", state.value);
    if (search.value.trim()) query.set("q", search.value.trim());
    if (cursor) query.set("cursor", cursor);
    return api(`/api/sessions?${query}`);
  };
  const load = async () => {
    const mine = ++generation;
    const rows = [];
    let cursor = null;
    for (let i = 0; i < pages; i++) {
      const answer = await page(cursor);
      rows.push(...answer.sessions);
      cursor = answer.nextCursor;
      if (!cursor) break;
    }
    if (mine !== generation) return; // a newer load (typing, a filter) started meanwhile
    body.replaceChildren(...rows.map(sessionRow));
    if (!rows.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No sessions.")));
    more.hidden = !cursor;
  };
  const restart = () => { pages = 1; load(); };
  let typing = null;
  state.addEventListener("change", restart);
  search.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(restart, 250); });
  more.addEventListener("click", () => { pages += 1; load(); });
  return every(2000, load);
}

function sessionView(sessionId, options = {}) {
  const conversation = el("div", { class: "conversation", "aria-live": "polite", "aria-label": "Conversation" });
  const permissions = el("div", { "aria-live": "assertive" });
  const status = el("span", { class: "muted", id: "stream-status" }, "connecting…");
  const input = el("textarea", { "aria-label": "Prompt", placeholder: "Send a prompt (Enter; Shift+Enter for a new line)", id: "prompt" });
  const send = el("button", { type: "submit", id: "send" }, "Send");
  const cancel = el("button", { type: "button", class: "quiet", id: "cancel" }, "Cancel turn");
  const composer = el("form", { class: "composer", id: "composer" }, input, el("div", { class: "actions" }, send, cancel));
  const exportButton = el("button", { type: "button", class: "quiet", id: "export", title: "The JSONL transcript (v3) of the session" }, "Export transcript");
  const title = el("h1", {}, sessionId);
  const head = el("div", { class: "session-head" }, title, status, el("span", { class: "spacer" }), exportButton);
  const readOnly = me.access !== "control";
  const side = sidePanel({
    sessionId,
    readOnly,
    onClose: async () => {
      if (!confirm("Close this session for good?")) return;
      await stream.request("session/close", { sessionId });
    },
  });
  view.replaceChildren(head, el("div", { class: "grid2" },
    el("section", {}, permissions, conversation, composer), el("aside", {}, side.node)));
  const chat = new Conversation(conversation);
  const link = options.permission
    ? landOnPermission({ sessionId, requestId: options.permission, box: permissions, readOnly })
    : null;
  exportButton.addEventListener("click", async () => {
    try {
      await download(`/api/sessions/${encodeURIComponent(sessionId)}/transcript`, `${sessionId}.jsonl`);
    } catch (error) {
      problem.textContent = `Could not export: ${error.message}`;
      problem.hidden = false;
    }
  });
  if (readOnly) {
    for (const node of [input, send, cancel]) node.disabled = true;
    input.placeholder = "This token is watch-only: it can follow the session, not prompt it.";
  }
  const dialogs = new Map();
  let stream = null;
  let details = null;

  // The server does not echo a connection's own prompt back to it: the page shows it when
  // sent. After a reconnect (a new connection) the store's copy may arrive once: skipped.
  const echoed = [];
  const handlers = {
    status: (text) => { status.textContent = text; },
    sent: (text) => {
      echoed.push(text);
      chat.last = null;
      chat.text("user", text);
      chat.last = null;
    },
    update: (update) => {
      const text = update.content && update.content.text;
      if (update.sessionUpdate === "user_message_chunk" && echoed.includes(text)) {
        echoed.splice(echoed.indexOf(text), 1);
        return;
      }
      chat.update(update);
    },
    answered: (answer, text) => {
      if (echoed.includes(text)) echoed.splice(echoed.indexOf(text), 1);
      if (answer.error) chat.stop(`error: ${answer.error.message}`);
      else chat.stop(answer.result.stopReason);
    },
    permission: (request) => {
      const params = request.params;
      const title = (params.toolCall && (params.toolCall.title || params.toolCall.toolCallId)) || "a tool call";
      const dialog = el("div", { class: "card permission", role: "dialog", "aria-label": "Permission request", "data-request": request.id },
        el("strong", {}, "Permission requested"), el("div", {}, title),
        el("div", { class: "options" }, (params.options || []).map((option) =>
          el("button", {
            type: "button",
            class: option.kind && option.kind.startsWith("reject") ? "danger" : "",
            "data-kind": option.kind,
            disabled: readOnly,
            onclick: () => {
              stream.answer(request, option.optionId);
              dialog.remove();
              dialogs.delete(request.id);
              if (link) link.settled(request.id);
            },
          }, option.name || option.optionId))));
      dialogs.set(request.id, dialog);
      permissions.append(dialog);
      const first = dialog.querySelector("button:not([disabled])");
      if (first) first.focus();
      if (link) link.arrived(request.id, dialog);
    },
    withdrawn: (requestId, how) => {
      const dialog = dialogs.get(requestId);
      if (link) link.settled(requestId);
      if (!dialog) return;
      dialogs.delete(requestId);
      const settled = how.settled || {};
      const text = settled.state === "withdrawn"
        ? "Withdrawn: the turn was cancelled or the wait timed out."
        : settled.decidedBy
          ? `Answered elsewhere: ${settled.optionId ?? "cancelled"} by ${settled.decidedBy}.`
          : "Answered elsewhere.";
      dialog.replaceChildren(el("div", { class: "banner" }, text));
      setTimeout(() => dialog.remove(), 4000);
    },
  };

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || !stream) return;
    stream.prompt(text);
    input.value = "";
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });
  cancel.addEventListener("click", () => stream && stream.notify("session/cancel", { sessionId }));

  const stopPolling = every(3000, async () => {
    details = await api(`/api/sessions/${encodeURIComponent(sessionId)}`);
    const workspace = details.hasWorkspace
      ? await api(`/api/sessions/${encodeURIComponent(sessionId)}/workspace`)
      : null;
    title.textContent = details.title || details.key || sessionId;
    side.render(details, workspace);
    if (!stream) stream = new SessionStream(details, handlers);
  });
  return () => {
    stopPolling();
    if (link) link.stop();
    if (stream) stream.close();
  };
}

function statusView() {
  const box = el("div");
  view.replaceChildren(el("h1", {}, "Status"), box);
  return every(3000, async () => {
    const s = await api("/api/status");
    const states = Object.entries(s.store.sessionsByState);
    box.replaceChildren(
      el("div", { class: "card" }, el("strong", {}, "Store"),
        el("dl", { class: "kv" },
          el("dt", {}, "File"), el("dd", {}, s.store.path),
          el("dt", {}, "Sessions"), el("dd", {}, states.map(([k, v]) => `${k} ${v}`).join(", ") || "none"),
          el("dt", {}, "Queued commands"), el("dd", {}, String(s.store.queuedCommands)),
          el("dt", {}, "Running commands"), el("dd", {}, String(s.store.runningCommands)))),
      el("div", { class: "card" }, el("strong", {}, "This server"),
        el("dl", { class: "kv" },
          el("dt", {}, "Running turns"), el("dd", {}, String(s.server.runningTurns)),
          el("dt", {}, "Waiting turns"), el("dd", {}, String(s.server.waitingTurns)),
          el("dt", {}, "Live sessions"), el("dd", {}, String(s.server.liveSessions)),
          el("dt", {}, "Connections"), el("dd", {}, String(s.server.connections)))),
      el("div", { class: "card" }, el("strong", {}, "Batches"),
        s.batches.length
          ? el("table", {}, el("thead", {}, el("tr", {}, ["Batch", "Done", "Running", "Queued", "Failed"].map((h) => el("th", {}, h)))),
              el("tbody", {}, s.batches.map((b) => el("tr", { "data-batch": b.id },
                el("td", {}, b.id), el("td", {}, String(b.done || 0)), el("td", {}, String(b.running || 0)),
                el("td", {}, String(b.queued || 0)), el("td", {}, String(b.failed || 0))))))
          : el("p", { class: "muted" }, "No batch runs in this store.")),
      el("div", { class: "card" }, el("strong", {}, "Nodes"),
        el("table", { id: "nodes" }, el("thead", {}, el("tr", {}, ["Node", "Host", "Labels", "Turns", "Lease left", "State"].map((h) => el("th", {}, h)))),
          el("tbody", {}, s.nodes.map((n) => el("tr", { "data-node": n.name },
            el("td", {}, n.name), el("td", {}, n.host), el("td", {}, n.labels.join(", ") || "–"),
            el("td", {}, `${n.runningTurns}/${n.capacity}`), el("td", {}, `${n.leaseLeftS.toFixed(1)} s`),
            el("td", {}, n.live ? "live" : "lease ran out")))))));
  });
}

async function route() {
  cleanup();
  cleanup = () => {};
  if (!auth.token) return showLogin();
  if (!me) {
    try {
      me = await api("/api/me");
    } catch {
      return logout("The token was refused.");
    }
  }
  document.getElementById("who").textContent = `${me.name} · ${me.access}${me.sessions === "own" ? " · own sessions" : ""}`;
  document.getElementById("logout").hidden = false;
  // #/s/<id>, #/s/<id>?permission=<request id> (a webhook's link), #/s/<id>/turns/<seq>
  const [path, query] = (location.hash || "#/").split("?", 2);
  const params = new URLSearchParams(query || "");
  const session = path.match(/^#\/s\/([^/]+)$/);
  const turn = path.match(/^#\/s\/([^/]+)\/turns\/([^/]+)$/);
  if (session) cleanup = sessionView(decodeURIComponent(session[1]), { permission: params.get("permission") });
  else if (turn) turnDiffView(view, decodeURIComponent(turn[1]), decodeURIComponent(turn[2])).catch((error) => {
    if (error instanceof Unauthorized) logout("The token was refused.");
  });
  else if (path === "#/status") cleanup = statusView();
  else cleanup = sessionsView();
}

document.getElementById("logout").addEventListener("click", () => logout());
window.addEventListener("hashchange", route);
route();
