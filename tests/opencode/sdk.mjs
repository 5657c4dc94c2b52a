// Drives `warden serve` with OpenCode's JS SDK (@opencode-ai/sdk, v2
// client): create a session, stream events, prompt, answer a permission
// ask, then prompt again and abort. Prints one JSON object of what it saw;
// tests/all/opencode.rs asserts it.
import { createOpencodeClient } from "@opencode-ai/sdk/v2";

const baseUrl = process.argv[2];
const password = process.env.OPENCODE_SERVER_PASSWORD;
const headers = password
  ? { Authorization: "Basic " + Buffer.from("opencode:" + password).toString("base64") }
  : {};
const client = createOpencodeClient({ baseUrl, headers });

const seen = [];
const events = await client.event.subscribe();
(async () => {
  for await (const e of events.stream) seen.push(e);
})();

// The first event at or after `from` that matches.
async function waitFor(from, pred, what) {
  const deadline = Date.now() + 60000;
  for (;;) {
    const i = seen.findIndex((e, i) => i >= from && pred(e));
    if (i >= 0) return i;
    if (Date.now() > deadline) throw new Error("no " + what + " event came; saw " + JSON.stringify(seen.map((e) => e.type)));
    await new Promise((r) => setTimeout(r, 20));
  }
}

await waitFor(0, (e) => e.type === "server.connected", "server.connected");
const created = await client.session.create({ title: "from the SDK" });
const session = created.data;
const mine = (e) => e.properties && e.properties.sessionID === session.id;

const start = seen.length;
const accepted = await client.session.promptAsync({
  sessionID: session.id,
  parts: [{ type: "text", text: "read hello.txt" }],
});
const ask = await waitFor(start, (e) => e.type === "permission.asked" && mine(e), "permission.asked");
const replied = await client.permission.reply({ requestID: seen[ask].properties.id, reply: "once" });
const idle = await waitFor(ask, (e) => e.type === "session.idle" && mine(e), "session.idle");
const firstRun = seen.slice(start, idle + 1).filter(mine);

// The events of the first prompt, with repeats of the same tool state dropped.
const story = [];
for (const e of firstRun) {
  let item = e.type;
  if (e.type === "session.status") item += ":" + e.properties.status.type;
  if (e.type === "message.part.updated") {
    const p = e.properties.part;
    if (p.type !== "tool") continue;
    item = "tool:" + p.tool + ":" + p.state.status;
  }
  if (e.type === "message.updated" || e.type === "session.created" || e.type === "session.updated") continue;
  if (story[story.length - 1] !== item) story.push(item);
}

const messages = (await client.session.messages({ sessionID: session.id })).data;
const answer = messages[messages.length - 1];

// A second prompt whose model answer is slow: abort it.
const second = seen.length;
await client.session.promptAsync({ sessionID: session.id, parts: [{ type: "text", text: "wait" }] });
await waitFor(second, (e) => e.type === "session.status" && mine(e) && e.properties.status.type === "busy", "busy");
const aborted = await client.session.abort({ sessionID: session.id });
await waitFor(second, (e) => e.type === "session.idle" && mine(e), "session.idle after the abort");
const after = (await client.session.messages({ sessionID: session.id })).data;
const last = after[after.length - 1];

console.log(JSON.stringify({
  session: { id: session.id, title: session.title, projectID: session.projectID },
  promptAsyncStatus: accepted.response.status,
  ask: { permission: seen[ask].properties.permission, patterns: seen[ask].properties.patterns, tool: seen[ask].properties.tool ? seen[ask].properties.tool.callID : null },
  replied: replied.data,
  story,
  answer: {
    role: answer.info.role,
    finish: answer.info.finish,
    text: answer.parts.filter((p) => p.type === "text").map((p) => p.text).join(""),
  },
  tool: messages.flatMap((m) => m.parts).filter((p) => p.type === "tool").map((p) => ({ tool: p.tool, callID: p.callID, status: p.state.status, output: p.state.output })),
  aborted: aborted.data,
  afterAbort: { role: last.info.role, error: last.info.error ? last.info.error.name : null },
}));
process.exit(0);
