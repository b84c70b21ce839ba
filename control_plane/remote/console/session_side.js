// A session's side panel: its facts, its workspace's turns (each a link to the files it
// changed), and its subagent tree with each child's state. Built once; each refresh redraws
// only what it shows, so a control that has the focus keeps it.

import { el, fill, stateBadge } from "./dom.js";

const sid = (id) => encodeURIComponent(id);

function name(s) {
  return s.title || s.key || s.id.slice(0, 8);
}

function outcome(s) {
  if (!s.lastOutcome) return null;
  const { state, stopReason } = s.lastOutcome;
  return el("span", { class: "muted outcome" }, ` last turn ${state}${stopReason ? ` (${stopReason})` : ""}`);
}

// The subagent tree, nested: each child with its state, a link to it, its last turn's
// outcome, and its own children below it.
export function subagentTree(children) {
  return el("ul", { class: "tree" }, children.map((c) =>
    el("li", { "data-session": c.id, "data-state": c.state },
      el("div", { class: "node" }, stateBadge(c.state), " ", el("a", { href: `#/s/${sid(c.id)}` }, name(c)),
        c.runningTurn ? el("span", { class: "muted" }, " running") : null,
        c.queued ? el("span", { class: "muted" }, ` +${c.queued} queued`) : null,
        outcome(c)),
      c.children && c.children.length ? subagentTree(c.children) : null)));
}

function count(children) {
  return children.reduce((n, c) => n + 1 + count(c.children || []), 0);
}

export function sidePanel({ sessionId, readOnly, onClose }) {
  const facts = el("dl", { class: "kv" });
  const close = el("button", { type: "button", class: "danger", id: "close-session", disabled: readOnly }, "Close session");
  close.addEventListener("click", onClose);
  const workspace = el("div", { class: "card", id: "workspace", hidden: true });
  const treeBody = el("div");
  const treeHead = el("strong", {}, "Subagents");
  const tree = el("div", { class: "card", id: "subagents", role: "region", "aria-label": "Subagents" }, treeHead, treeBody);
  const node = el("div", {}, el("div", { class: "card" }, facts, el("div", { class: "row" }, close)), workspace, tree);
  let treeShown = "";
  let workspaceShown = "";

  const renderFacts = (d) => {
    fill(facts,
      el("dt", {}, "State"), el("dd", { id: "session-state" }, stateBadge(d.state)),
      d.parentId ? [el("dt", {}, "Parent"), el("dd", {}, el("a", { href: `#/s/${sid(d.parentId)}`, id: "parent-link" }, d.parentId.slice(0, 8)))] : null,
      el("dt", {}, "Agent"), el("dd", {}, d.agent),
      el("dt", {}, "Directory"), el("dd", {}, d.cwd),
      el("dt", {}, "Queue mode"), el("dd", {}, d.queueMode),
      el("dt", {}, "Queued"), el("dd", {}, String(d.queued)),
      el("dt", {}, "Usage"), el("dd", {}, `${d.usage.tokens} tokens, $${d.usage.costUsd.toFixed(4)}`),
      d.children.length ? [el("dt", {}, "With subagents"), el("dd", {}, `${d.treeUsage.tokens} tokens, $${d.treeUsage.costUsd.toFixed(4)}`)] : null,
      d.key ? [el("dt", {}, "Key"), el("dd", {}, d.key)] : null,
      d.lastError ? [el("dt", {}, "Error"), el("dd", {}, d.lastError)] : null);
    close.disabled = readOnly || d.state === "closed";
  };

  const renderTree = (d) => {
    const shown = JSON.stringify(d.children);
    if (shown === treeShown) return; // unchanged: keep the nodes (and any focus in them)
    treeShown = shown;
    treeHead.textContent = d.children.length ? `Subagents (${count(d.children)})` : "Subagents";
    fill(treeBody,
      d.children.length ? subagentTree(d.children) : el("p", { class: "muted" }, "None."),
      d.treeTruncated ? el("p", { class: "muted" }, "Only the first 200 are shown.") : null);
  };

  const renderWorkspace = (w) => {
    const shown = JSON.stringify(w);
    if (!w || !w.workspace || shown === workspaceShown) return;
    workspaceShown = shown;
    workspace.hidden = false;
    fill(workspace, el("strong", {}, "Workspace"),
      el("dl", { class: "kv" },
        el("dt", {}, "Branch"), el("dd", {}, w.workspace.branch),
        el("dt", {}, "Worktree"), el("dd", {}, w.workspace.path, w.workspace.exists ? "" : " (removed)")),
      w.turns.length
        ? el("ul", { class: "turns" }, w.turns.map((t) => el("li", { "data-turn": t.seq },
            el("a", { href: `#/s/${sid(sessionId)}/turns/${t.seq}` }, `Files changed in turn ${t.seq}`))))
        : el("p", { class: "muted" }, "No turn has ended yet."));
  };

  return {
    node,
    render(details, workspaceAnswer) {
      renderFacts(details);
      renderTree(details);
      renderWorkspace(workspaceAnswer);
    },
  };
}
