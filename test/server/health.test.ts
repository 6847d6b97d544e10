// Health's identity fields through HTTP on a real engine: deployment_id (the addon's bytes and
// the kernel set), component_set_sha (the model file's sha256, cached by path, size and mtime in
// $MASHBOX_HOME/hashes.json; null until the worker has it), certification (the start-up kernel
// gate, "passed" on this CPU), compiles_after_ready (0 from ready on, through a worker restart,
// and the same in /metrics: the kernels are compiled ahead of time; null before ready) and
// routed_experts (the MoE path and the routed call sites that ran). The gate's failing path is
// tested natively (native/kernels/tests/test_kernels.cpp, test_certify) with wrong kernels.
import { expect } from "chai";
import { createHash } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { addonPath } from "../../src/engine/native.js";
import { defaultModelPath, postJson, startTestServer } from "../helpers/server.js";

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

async function health(url: string): Promise<Record<string, unknown>> {
  const r = await fetch(url + "/v1/health");
  expect(r.status).to.equal(200);
  return (await r.json()) as Record<string, unknown>;
}

/** Health once the worker has sent the model's digest (a first hash may follow readiness). */
async function hashedHealth(url: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 200; i++) {
    const h = await health(url);
    if (h.component_set_sha !== null) return h;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("component_set_sha still null after 10 s");
}

describe("Health identity fields", function () {
  this.timeout(120000);
  let home: string;
  let model: string;
  const savedHome = process.env.MASHBOX_HOME;
  before(() => {
    home = mkdtempSync(join(tmpdir(), "mb-health-"));
    process.env.MASHBOX_HOME = home;  // the worker inherits it: hashes.json goes here
    model = join(home, "model.gguf");  // a copy, so its mtime can be changed
    copyFileSync(defaultModelPath(), model);
  });
  after(() => {
    if (savedHome === undefined) delete process.env.MASHBOX_HOME;
    else process.env.MASHBOX_HOME = savedHome;
    rmSync(home, { recursive: true, force: true });
  });

  it("reports the addon and kernel set, the model's sha256 and a passed gate, the same on every call", async () => {
    const s = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    try {
      const h = await hashedHealth(s.url);
      const addon = sha256(addonPath()).slice(0, 16);
      expect(h.deployment_id).to.match(new RegExp(`^${addon}-(avx512amx|avx512vnni|avx2|ref)$`));
      expect(h.component_set_sha).to.equal(sha256(model));
      expect(h.certification).to.equal("passed");
      expect(h.compiles_after_ready).to.equal(0);
      const again = await health(s.url);
      for (const k of ["deployment_id", "component_set_sha", "certification", "compiles_after_ready"]) expect(again[k], k).to.deep.equal(h[k]);
      const cache = JSON.parse(readFileSync(join(home, "hashes.json"), "utf8"));
      expect(cache[model].sha256).to.equal(sha256(model));
    } finally {
      await s.close();
    }
  });

  it("compiles_after_ready: a count from ready on, through a worker restart, equal to the metric", async () => {
    const s = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    const metric = async () => {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      const line = /^mashbox:compiles_after_ready_total (\S+)$/m.exec(text);
      expect(line, "mashbox:compiles_after_ready_total").to.not.equal(null);
      return Number(line![1]);
    };
    try {
      expect((await postJson(`${s.url}/v1/completions`, { prompt: "x", max_tokens: 3 })).status).to.equal(200);
      const h = await health(s.url);
      expect(h.compiles_after_ready).to.equal(0);
      expect(await metric()).to.equal(h.compiles_after_ready);
      // Counted over every worker the server ran: a restarted one does not make it unknown again.
      process.kill(h.worker_pid as number, "SIGKILL");
      let after = h;
      for (let i = 0; i < 600 && !(after.status === "ok" && after.worker_restarts === 1); i++) {
        await new Promise((r) => setTimeout(r, 50));
        const r = await fetch(s.url + "/v1/health");
        after = (await r.json()) as Record<string, unknown>;
        if (after.status === "loading") expect(after.compiles_after_ready, "while the worker restarts").to.equal(0);
      }
      expect(after.worker_restarts).to.equal(1);
      expect(after.compiles_after_ready).to.equal(0);
      expect(await metric()).to.equal(0);
    } finally {
      await s.close();
    }
  });

  it("takes the digest from the cache while size and mtime match, and hashes a changed file again", async () => {
    const cacheFile = join(home, "hashes.json");
    const cache = JSON.parse(readFileSync(cacheFile, "utf8"));
    const planted = "ab".repeat(32);
    cache[model].sha256 = planted;  // what only a cache read can report
    writeFileSync(cacheFile, JSON.stringify(cache));
    let s = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    try {
      expect((await hashedHealth(s.url)).component_set_sha).to.equal(planted);
    } finally {
      await s.close();
    }
    const later = new Date(Date.now() + 60_000);
    utimesSync(model, later, later);
    s = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    try {
      expect((await hashedHealth(s.url)).component_set_sha).to.equal(sha256(model));
    } finally {
      await s.close();
    }
  });

  it("kernel set names differ by set: MB_KERNELS=ref gives another deployment_id, also certified", async () => {
    const saved = process.env.MB_KERNELS;
    process.env.MB_KERNELS = "ref";
    let s;
    try {
      s = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    } finally {
      if (saved === undefined) delete process.env.MB_KERNELS;
      else process.env.MB_KERNELS = saved;
    }
    try {
      const h = await health(s.url);
      expect(h.deployment_id).to.equal(`${sha256(addonPath()).slice(0, 16)}-ref`);
      expect(h.certification).to.equal("passed");
    } finally {
      await s.close();
    }
  });

  it("routed_experts: null on a dense model, on qwen3moe and gpt-oss the exact path and the sites that ran, counted", async () => {
    const chat = (url: string) =>
      postJson(url + "/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], max_tokens: 3 });
    const dense = await startTestServer({ model_path: model, slots: 1, ctx: 128 });
    try {
      expect((await chat(dense.url)).status).to.equal(200);
      expect((await health(dense.url)).routed_experts).to.equal(null);
    } finally {
      await dense.close();
    }
    for (const fixture of ["test/fixtures/qwen3moe-q8_0.gguf", "test/fixtures/gpt-oss-mxfp4.gguf"]) {
      const moe = await startTestServer({ model_path: fixture, slots: 1, ctx: 128 });
      try {
        const before = await health(moe.url);
        expect(before.certification).to.equal("passed");
        expect(before.routed_experts, "before any routed call").to.equal(null);
        expect((await chat(moe.url)).status).to.equal(200);
        const first = (await health(moe.url)).routed_experts as { path: string; kernel: unknown; sites: { exact: Record<string, number> }; exact_why: string };
        expect(first.path).to.equal("exact");
        expect(first.kernel).to.equal(null);
        expect(first.exact_why).to.be.a("string").and.not.equal("");
        expect(Object.keys(first.sites)).to.deep.equal(["exact"]);
        expect(Object.keys(first.sites.exact).sort()).to.deep.equal(["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"]);
        for (const n of Object.values(first.sites.exact)) expect(n).to.be.greaterThan(0);
        expect((await chat(moe.url)).status).to.equal(200);
        const second = (await health(moe.url)).routed_experts as typeof first;
        for (const [site, n] of Object.entries(second.sites.exact)) expect(n, site).to.be.greaterThan(first.sites.exact[site]);
      } finally {
        await moe.close();
      }
    }
  });
});
