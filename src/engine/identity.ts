// The two ids Health reports about what this server runs, computed in the worker process (a
// model file is read as a stream, so the worker's own messages are not held up either):
//  - deployment_id: the native program (the addon's bytes) and the kernel set picked on this CPU;
//    two servers with the same id run the same machine code on the same kind of chip.
//  - component_set_sha: sha256 of the model file, which is all its tensors and metadata. Hashing
//    gigabytes takes seconds, so the digest is kept in $MASHBOX_HOME/hashes.json (default
//    ~/.cache/mashbox) under the file's path, size and mtime; a changed file is hashed again. The
//    worker does not wait for a first hash to report ready (Health says null until it lands).
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";

export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) h.update(chunk as Buffer);
  return h.digest("hex");
}

export async function deploymentId(addonFile: string, kernels: string): Promise<string> {
  const addon = createHash("sha256").update(await readFile(addonFile)).digest("hex");
  return `${addon.slice(0, 16)}-${kernels}`;
}

function hashCacheFile(): string {
  const root = process.env.MASHBOX_HOME ?? join(homedir(), ".cache", "mashbox");
  return join(root, "hashes.json");
}

interface CachedHash {
  size: number;
  mtime_ms: number;
  sha256: string;
}

async function readCache(file: string): Promise<Record<string, CachedHash>> {
  try {
    const parsed: unknown = JSON.parse(await readFile(file, "utf8"));
    return parsed && typeof parsed === "object" ? (parsed as Record<string, CachedHash>) : {};
  } catch {
    return {}; // absent or unreadable: hash again
  }
}

export async function componentSetSha(modelPath: string): Promise<string> {
  const path = resolve(modelPath);
  const st = await stat(path);
  const cacheFile = hashCacheFile();
  const hit = (await readCache(cacheFile))[path];
  if (hit && hit.size === st.size && hit.mtime_ms === st.mtimeMs && typeof hit.sha256 === "string") return hit.sha256;
  const sha = await sha256File(path);
  try {
    // Read again just before writing: another server may have added its model meanwhile.
    const cache = await readCache(cacheFile);
    cache[path] = { size: st.size, mtime_ms: st.mtimeMs, sha256: sha };
    await mkdir(dirname(cacheFile), { recursive: true });
    const tmp = `${cacheFile}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(cache));
    await rename(tmp, cacheFile);
  } catch {
    // A read-only home costs a hash per start, nothing else.
  }
  return sha;
}
