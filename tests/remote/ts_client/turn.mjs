// One client nobody here wrote: the TypeScript ACP SDK's experimental remote transport,
// against `acpctl serve --listen`. A session, then a turn whose tool call asks permission
// (allowed here). Prints what it saw as one JSON line.
//   node turn.mjs URL TOKEN ws|http CWD
import { client, methods } from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

const [url, token, transport, cwd] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };
const stream =
  transport === "ws"
    ? createWebSocketStream(url.replace(/^http/, "ws"), { headers, WebSocket })
    : createHttpStream(url, { headers });

const seen = { updates: 0, positions: [], permissions: 0, text: "" };
const result = await client({ name: "acpctl-interop" })
  .onRequest(methods.client.session.requestPermission, async (ctx) => {
    seen.permissions += 1;
    const allow = ctx.params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onNotification(methods.client.session.update, async (ctx) => {
    seen.updates += 1;
    const update = ctx.params.update;
    if (update.sessionUpdate === "agent_message_chunk") seen.text += update.content.text;
    const position = ctx.params._meta?.acpctl?.position;
    if (position !== undefined) seen.positions.push(position);
  })
  .connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, {
      protocolVersion: 1,
      clientCapabilities: {},
    });
    const session = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
    const turn = await ctx.request(methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: "#permission #tool hello from node" }],
    });
    return {
      loadSession: init.agentCapabilities?.loadSession,
      sessionId: session.sessionId,
      stopReason: turn.stopReason,
    };
  });
console.log(JSON.stringify({ ...result, ...seen }));
process.exit(0);
