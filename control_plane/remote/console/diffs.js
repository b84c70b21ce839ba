// Diffs as readable unified diffs: the ones agents report in tool calls (ACP tool call
// content `{type: "diff", path, oldText, newText}`: the lines are compared here) and git's
// own (a turn's workspace checkpoint, from /api/sessions/{id}/turns/{seq}/diff).

import { el } from "./dom.js";

const CONTEXT = 3; // unchanged lines kept around each change, as `diff -u`

export function lineDiff(oldText, newText) {
  const a = oldText ? oldText.replace(/\n$/, "").split("\n") : [];
  const b = newText ? newText.replace(/\n$/, "").split("\n") : [];
  if (a.length * b.length > 160000) {
    return [...a.map((l) => ["del", l]), ...b.map((l) => ["add", l])];
  }
  const lcs = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--)
    for (let j = b.length - 1; j >= 0; j--)
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) { out.push(["same", a[i]]); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["del", a[i++]]);
    else out.push(["add", b[j++]]);
  }
  while (i < a.length) out.push(["del", a[i++]]);
  while (j < b.length) out.push(["add", b[j++]]);
  return out;
}

// The changed lines with CONTEXT unchanged ones around them, in hunks with their
// `@@ -start,count +start,count @@` header (1-based, as diff -u writes them).
export function hunks(ops) {
  const keep = ops.map(() => false);
  ops.forEach(([kind], index) => {
    if (kind === "same") return;
    for (let k = Math.max(0, index - CONTEXT); k <= Math.min(ops.length - 1, index + CONTEXT); k++) keep[k] = true;
  });
  const out = [];
  let oldLine = 1;
  let newLine = 1;
  let current = null;
  ops.forEach(([kind, text], index) => {
    if (keep[index]) {
      if (!current) {
        current = { oldStart: oldLine, newStart: newLine, oldCount: 0, newCount: 0, lines: [] };
        out.push(current);
      }
      current.lines.push([kind, text]);
      if (kind !== "add") current.oldCount++;
      if (kind !== "del") current.newCount++;
    } else current = null;
    if (kind !== "add") oldLine++;
    if (kind !== "del") newLine++;
  });
  return out;
}

function range(start, count) {
  return count === 1 ? `${start}` : `${count ? start : start - 1},${count}`;
}

const SIGN = { add: "+", del: "-", same: " " };

export function toolDiff(item) {
  const ops = lineDiff(item.oldText, item.newText);
  const added = ops.filter(([k]) => k === "add").length;
  const removed = ops.filter(([k]) => k === "del").length;
  const created = item.oldText === null || item.oldText === undefined;
  return el("div", { class: "diff", "data-path": item.path || "" },
    el("div", { class: "file-head" }, el("span", { class: "path" }, item.path || ""), " ",
      el("span", { class: "muted" }, created ? `new file, +${added}` : `+${added} −${removed}`)),
    el("div", { class: "lines" },
      created ? null : el("div", { class: "meta" }, `--- a/${item.path || ""}`),
      el("div", { class: "meta" }, `+++ b/${item.path || ""}`),
      hunks(ops).map((h) => [
        el("div", { class: "hunk-head" }, `@@ -${range(h.oldStart, h.oldCount)} +${range(h.newStart, h.newCount)} @@`),
        h.lines.map(([kind, text]) => el("div", { class: kind }, `${SIGN[kind]}${text}`)),
      ])));
}

// git diff's text, one folding section per file with its +/- counts.
export function gitDiff(text) {
  const files = text.split(/^(?=diff --git )/m).filter((part) => part.trim());
  return files.map((part) => {
    const lines = part.replace(/\n$/, "").split("\n");
    const name = (lines[0].match(/^diff --git a\/(.*) b\/(.*)$/) || [])[2] || lines[0];
    let added = 0;
    let removed = 0;
    let inHunk = false;
    const rows = lines.slice(1).map((line) => {
      if (line.startsWith("@@")) { inHunk = true; return el("div", { class: "hunk-head" }, line); }
      if (!inHunk) return el("div", { class: "meta" }, line);
      if (line.startsWith("+")) { added++; return el("div", { class: "add" }, line); }
      if (line.startsWith("-")) { removed++; return el("div", { class: "del" }, line); }
      return el("div", { class: line.startsWith("\\") ? "meta" : "same" }, line);
    });
    return el("details", { class: "diff file", open: true, "data-path": name },
      el("summary", { class: "file-head" }, el("span", { class: "path" }, name), " ",
        el("span", { class: "muted" }, `+${added} −${removed}`)),
      el("div", { class: "lines" }, rows));
  });
}
