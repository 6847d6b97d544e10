// The host prompt cache's disk tier over real HTTP: a server started after another stopped reads
// the conversation back from the directory (the second turn is served from it), torn and foreign
// files are removed while a request is still answered, and a directory that cannot be written
// never fails a request.
import { expect } from "chai";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EngineOptions } from "../../src/engine/engine.js";
import { startLiveServer, type LiveServer } from "../helpers/live.js";
import { postJson } from "../helpers/server.js";

const CACHE_MIB = 64;

function serve(dir: string, over: Partial<EngineOptions> = {}): Promise<LiveServer> {
  return startLiveServer({ ctx: 2048, model_id: "disk-model", engine_options: { cache_ram_mib: CACHE_MIB, cache_dir: dir, cache_disk_mib: 64, ...over }, app: { cache_ram_mib: CACHE_MIB } });
}

const SYSTEM =
  "You are Keel, an agent that maintains a Rust workspace. Read the crate's Cargo.toml before touching it, run cargo test " +
  "after each edit, keep commits small, and answer with what you changed and why in at most three sentences.";
const TOOLS = ["cargo_test", "read_file", "apply_patch", "grep"].map((name) => ({
  type: "function",
  function: {
    name,
    description: `${name}: runs in the workspace root and returns its output as text.`,
    parameters: { type: "object", properties: { arg: { type: "string", description: "The argument, as the command line takes it." } }, required: ["arg"] },
  },
}));
const TURN1 = [{ role: "system", content: SYSTEM }, { role: "user", content: "cargo test fails in crates/io with a borrow error after the last refactor of the reader; why, and what would you change first?" }];

type ChatBody = { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } }; choices: { message: { content: string | null } }[] };

async function chatTurn(url: string, messages: unknown[]): Promise<ChatBody> {
  const r = await postJson(`${url}/v1/chat/completions`, { model: "disk-model", messages, tools: TOOLS, max_tokens: 8, temperature: 0 });
  expect(r.status).to.equal(200);
  return (await r.json()) as ChatBody;
}

async function health(url: string) {
  return (await (await fetch(`${url}/v1/health`)).json()) as Record<string, number>;
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
}

const blockFiles = (dir: string) => readdirSync(dir).filter((f) => f.endsWith(".mbkv"));

describe("prompt cache disk tier over HTTP", function () {
  this.timeout(180000);
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), "mb-disk-tier-"))));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("serves the second turn of a conversation from disk after a server restart", async () => {
    const a = await serve(dir);
    let answer = "";
    try {
      const first = await chatTurn(a.url, TURN1);
      expect(first.usage.prompt_tokens_details.cached_tokens).to.equal(0);
      answer = first.choices[0].message.content ?? "";
      const h = await health(a.url);
      expect(h.host_cache_disk_cap_bytes).to.equal(64 * 1024 * 1024);
    } finally {
      await a.close();
    }
    expect(blockFiles(dir).length).to.be.greaterThan(0);

    const b = await serve(dir);
    try {
      const before = await health(b.url);
      expect(before.host_cache_bytes).to.equal(0); // host memory starts empty: what follows is from disk
      expect(before.host_cache_disk_bytes).to.be.greaterThan(0);
      const second = await chatTurn(b.url, [...TURN1, { role: "assistant", content: answer.length > 0 ? answer : "Let me look." }, { role: "user", content: "Fix it." }]);
      const cached = second.usage.prompt_tokens_details.cached_tokens;
      expect(cached / second.usage.prompt_tokens, `${cached}/${second.usage.prompt_tokens}`).to.be.at.least(0.9);
      const h = await health(b.url);
      expect(h.host_cache_disk_hits).to.be.at.least(cached);
      expect(await metric(b.url, "mashbox:host_cache_disk_hits_total")).to.equal(h.host_cache_disk_hits);
      expect(await metric(b.url, "mashbox:host_cache_disk_bytes")).to.equal(h.host_cache_disk_bytes);
      expect(await metric(b.url, "mashbox:host_cache_disk_cap_bytes")).to.equal(64 * 1024 * 1024);
      expect(await metric(b.url, "mashbox:host_cache_disk_evictions_total")).to.equal(0);
    } finally {
      await b.close();
    }
  });

  it("removes a torn file and a foreign-namespace file, and still answers", async () => {
    const files = blockFiles(dir).sort();
    expect(files.length).to.be.at.least(2);
    const torn = join(dir, files[0]);
    truncateSync(torn, statSync(torn).size - 100);
    // another namespace's header under this namespace's name (bytes 24..40 hold the namespace)
    const foreign = join(dir, files[1]);
    const bytes = readFileSync(foreign);
    bytes[24] ^= 0x5a;
    writeFileSync(foreign, bytes);
    const s = await serve(dir);
    try {
      const left = blockFiles(dir);
      expect(left).to.not.include(files[0]);
      expect(left).to.not.include(files[1]);
      expect(await metric(s.url, "mashbox:host_cache_disk_rejected_total")).to.equal(2);
      const r = await chatTurn(s.url, TURN1);
      expect(r.usage.prompt_tokens).to.be.greaterThan(0);
    } finally {
      await s.close();
    }
  });

  it("answers as usual when the directory cannot be written", async () => {
    const file = join(dir, "not-a-dir");
    writeFileSync(file, "x");
    const s = await serve(join(file, "cache"));
    try {
      const first = await chatTurn(s.url, TURN1);
      expect(first.usage.prompt_tokens).to.be.greaterThan(0);
      const again = await chatTurn(s.url, [...TURN1, { role: "assistant", content: "Let me look." }, { role: "user", content: "Fix it." }]);
      // host memory still serves the conversation
      expect(again.usage.prompt_tokens_details.cached_tokens).to.be.greaterThan(0);
      const h = await health(s.url);
      expect(h.status).to.equal("ok");
      expect(h.host_cache_disk_bytes).to.equal(0);
    } finally {
      await s.close();
    }
  });
});
