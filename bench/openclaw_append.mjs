// Append messages to an OpenClaw session store through OpenClaw's own SessionManager: what a gateway writes
// between two `lcm-etl reconcile --watch` syncs. Used by bench/run.py where OpenClaw is installed; needs an
// OpenClaw installation (not a dependency of the project; install steps: docs/benchmarks.md, History, 2026-11-28).
//
//   OPENCLAW_STATE_DIR=<tmp> HOME=<tmp> <node 24> bench/openclaw_append.mjs --openclaw DIR --store FILE \
//       --messages N [--windows K] [--agent ID]
//
// DIR is the folder OpenClaw was installed into (DIR/node_modules/openclaw). N messages are spread over the first K
// windows (session_nodes' current windows in key order; default: all), alternating user and assistant messages,
// each window opened once with SessionManager.open(target, cwd) and appended to with appendMessage, one SQLite
// transaction per message, as the embedded runner appends a turn. Prints one JSON line: what was appended, how
// long it took, and which OpenClaw and Node did it.
import { readFileSync } from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { pathToFileURL } from "node:url";

function options(argv) {
  const out = { windows: 0, agent: "" };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!["openclaw", "store", "messages", "windows", "agent"].includes(key) || argv[i + 1] === undefined) {
      throw new Error(`usage: openclaw_append.mjs --openclaw DIR --store FILE --messages N [--windows K] [--agent ID]`);
    }
    out[key] = ["messages", "windows"].includes(key) ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!out.openclaw || !out.store || !(out.messages > 0)) throw new Error("--openclaw, --store and --messages N > 0");
  return out;
}

const opts = options(process.argv.slice(2));
const pkg = path.join(path.resolve(opts.openclaw), "node_modules", "openclaw");
const version = JSON.parse(readFileSync(path.join(pkg, "package.json"), "utf8")).version;
const { SessionManager } = await import(pathToFileURL(path.join(pkg, "dist", "plugin-sdk", "agent-sessions.js")).href);

const storePath = path.resolve(opts.store);
const db = new DatabaseSync(storePath, { readOnly: true });
const agentId = opts.agent || db.prepare("SELECT agent_id FROM schema_meta WHERE meta_key = 'primary'").get().agent_id;
let windows = db.prepare("SELECT session_key, current_session_id FROM session_nodes ORDER BY session_key").all();
db.close();
if (opts.windows > 0) windows = windows.slice(0, opts.windows);

const started = performance.now();
let appended = 0;
let opened = 0;
for (let w = 0; w < windows.length && appended < opts.messages; w++) {
  const share = Math.floor(opts.messages / windows.length) + (w < opts.messages % windows.length ? 1 : 0);
  if (share === 0) continue;
  const { session_key: sessionKey, current_session_id: sessionId } = windows[w];
  const manager = SessionManager.open({ agentId, sessionId, sessionKey, storePath }, "/home/claw/.openclaw/workspace");
  opened += 1;
  for (let i = 0; i < share; i++, appended++) {
    const text = `bench turn ${appended} of ${opts.messages}`;
    manager.appendMessage(i % 2 === 0
      ? { role: "user", content: text, timestamp: Date.now() }
      : { role: "assistant", content: [{ type: "text", text }], provider: "anthropic", model: "claude-sonnet-4-5",
          stopReason: "stop", timestamp: Date.now() });
  }
}
const seconds = (performance.now() - started) / 1000;
console.log(JSON.stringify({ appended, windows: opened, seconds: Math.round(seconds * 100) / 100,
                             writer: `OpenClaw ${version} SessionManager`, node: process.version }));
process.exit(0);
