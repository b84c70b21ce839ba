// The TypeScript ACP SDK's client forks a session through `acpctl serve --listen`: a
// session and a turn, `session/fork` (unstable in ACP), a turn of the fork. Prints what it
// saw as one JSON line.
//   node fork.mjs URL TOKEN ws|http CWD
import { client, methods } from "@agentclientprotocol/sdk/unstable";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import WebSocket from "ws";

const [url, token, transport, cwd] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };
const stream =
  transport === "ws"
    ? createWebSocketStream(url.replace(/^http/, "ws"), { headers, WebSocket })
    : createHttpStream(url, { headers });

const text = {};
const result = await client({ name: "acpctl-interop-fork" })
  .onNotification(methods.client.session.update, async (ctx) => {
    const update = ctx.params.update;
    if (update.sessionUpdate === "agent_message_chunk") {
      text[ctx.params.sessionId] = (text[ctx.params.sessionId] ?? "") + update.content.text;
    }
  })
  .connectWith(stream, async (ctx) => {
    const init = await ctx.request(methods.agent.initialize, {
      protocolVersion: 1,
      clientCapabilities: {},
    });
    const session = await ctx.request(methods.agent.session.new, { cwd, mcpServers: [] });
    await ctx.request(methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: "remember apples" }],
    });
    const forked = await ctx.request(methods.agent.session.fork, {
      sessionId: session.sessionId,
      cwd,
      mcpServers: [],
    });
    const turn = await ctx.request(methods.agent.session.prompt, {
      sessionId: forked.sessionId,
      prompt: [{ type: "text", text: "#history then pears" }],
    });
    return {
      forkAdvertised: init.agentCapabilities?.sessionCapabilities?.fork != null,
      sessionId: session.sessionId,
      forkId: forked.sessionId,
      forkMeta: forked._meta?.acpctl ?? null,
      stopReason: turn.stopReason,
      forkText: text[forked.sessionId] ?? "",
    };
  });
console.log(JSON.stringify(result));
process.exit(0);
