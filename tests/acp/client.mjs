// Drives `warden acp` with the Agent Client Protocol's official TypeScript
// SDK (@agentclientprotocol/sdk, stable v1): spawns the agent, runs the
// plan's steps in order, and prints one JSON object of everything it saw.
// tests/all/acp.rs writes the plans and asserts what comes back.
//
// argv: WARDEN PLAN_JSON. The plan: {args, cwd, answers, steps}; `answers`
// are the options chosen for each session/request_permission, in order
// ("cancelled" answers with the cancelled outcome, "error" with a JSON-RPC
// error); each step is one of
//   {"do": "initialize", "capabilities": CAPS}    -> CAPS merged into its own
//   {"do": "new", "cwd": DIR}                      -> session id kept
//   {"do": "prompt", "text": T, "cancelOn": STATUS} -> cancels when a tool
//                                                     call reaches STATUS
//   {"do": "load", "sessionId": ID, "cwd": DIR}
//   {"do": "list"}
// A failed request is recorded with its code and message, not thrown.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [warden, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const child = spawn(warden, plan.args, {
  cwd: plan.cwd,
  stdio: ["pipe", "pipe", "inherit"],
});
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

// Everything in arrival order: updates, asks, answers.
const log = [];
const answers = [...(plan.answers ?? [])];
let watcher = null;

const app = acp
  .client({ name: "warden-acp-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    log.push({ update: params.update, sessionId: params.sessionId });
    if (watcher) watcher(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const choice = answers.shift() ?? "cancelled";
    log.push({
      ask: {
        toolCallId: params.toolCall.toolCallId,
        options: params.options.map((o) => [o.optionId, o.kind]),
        choice,
      },
    });
    if (choice === "error") throw new acp.RequestError(-32601, "this client cannot ask");
    if (choice === "cancelled") return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: choice } };
  });

async function attempt(what, run) {
  try {
    const result = await run();
    log.push({ [what]: result ?? null });
    return result;
  } catch (e) {
    log.push({ [what]: { error: { code: e.code ?? null, message: String(e.message) } } });
    return null;
  }
}

const out = await app.connectWith(stream, async (ctx) => {
  let sessionId = null;
  for (const step of plan.steps) {
    if (step.do === "initialize") {
      await attempt("initialize", () =>
        ctx.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: {
            fs: { readTextFile: false, writeTextFile: false },
            ...(step.capabilities ?? {}),
          },
          clientInfo: { name: "acp-test-editor", version: "9.1" },
        }),
      );
    } else if (step.do === "new") {
      const r = await attempt("new", () =>
        ctx.request(acp.methods.agent.session.new, { cwd: step.cwd, mcpServers: step.mcpServers ?? [] }),
      );
      if (r) sessionId = r.sessionId;
    } else if (step.do === "prompt") {
      if (step.cancelOn) {
        let sent = false;
        watcher = (params) => {
          const u = params.update;
          if (!sent && u.sessionUpdate === "tool_call_update" && u.status === step.cancelOn) {
            sent = true;
            log.push({ cancel: u.toolCallId });
            ctx.notify(acp.methods.agent.session.cancel, { sessionId });
          }
        };
      }
      await attempt("prompt", () =>
        ctx.request(acp.methods.agent.session.prompt, {
          sessionId: step.sessionId ?? sessionId,
          prompt: [{ type: "text", text: step.text }],
        }),
      );
      watcher = null;
    } else if (step.do === "load") {
      await attempt("load", () =>
        ctx.request(acp.methods.agent.session.load, {
          sessionId: step.sessionId,
          cwd: step.cwd,
          mcpServers: [],
        }),
      );
    } else if (step.do === "list") {
      await attempt("list", () => ctx.request(acp.methods.agent.session.list, {}));
    } else {
      throw new Error("unknown step " + JSON.stringify(step));
    }
  }
  return { sessionId, log };
});

child.stdin.end();
const code = await new Promise((resolve) => child.on("exit", (c) => resolve(c)));
console.log(JSON.stringify({ ...out, exit: code }));
