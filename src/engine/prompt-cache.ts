// The JS side of the host prompt cache (native/engine/prompt_cache.h): where its file lives, the
// namespace that says what its states are valid for, and the state point of a chat prompt.
import { createHash } from "node:crypto";
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readSync, realpathSync, statfsSync, unlinkSync, accessSync, constants } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { renderChatPrompt } from "../chat/template.js";
import type { ChatPrompt, ModelInfo } from "./types.js";

/** Bumped whenever what a saved state means changes on this side (prompt building, policy). */
const CACHE_POLICY = "mashbox-prompt-cache/1";
/** GGUF metadata (tokenizer vocabulary, merges, chat template) sits at the start of the file. */
const METADATA_BYTES = 16 << 20;
const FILE_PREFIX = "mashbox-cache-";

/**
 * What a state is valid for, from the JS side: the weights file (path, size, mtime), a digest of
 * its metadata (tokenizer and chat template live there) and the cache policy. The native side
 * adds the K/V layout and type before hashing it into the id Health reports.
 */
export function cacheNamespace(model_path: string): string {
  const h = createHash("sha256");
  h.update(`${CACHE_POLICY}\n`);
  let fd = -1;
  try {
    const real = realpathSync(model_path);
    fd = openSync(real, "r");
    const st = fstatSync(fd);
    h.update(`${real}\n${st.size}\n${st.mtimeMs}\n`);
    const buf = Buffer.alloc(Math.min(METADATA_BYTES, st.size));
    const n = readSync(fd, buf, 0, buf.length, 0);
    h.update(buf.subarray(0, n));
  } catch {
    // The load will fail and report why; the cache never opens.
    h.update(`unreadable:${model_path}`);
  } finally {
    if (fd >= 0) closeSync(fd);
  }
  return h.digest("hex");
}

/**
 * Shared memory when the OS has room for the whole cap there (the file is page cache either way,
 * but tmpfs never writes it back to a disk), else the OS temp dir. A mapped file whose filesystem
 * fills up kills the process on the next page it touches (SIGBUS), so a directory without room
 * for the cap is never used; null = none has it (the cache stays in the worker's own memory).
 */
function cacheDir(cap_bytes: number): string | null {
  for (const dir of ["/dev/shm", tmpdir()]) {
    try {
      accessSync(dir, constants.W_OK);
      const fs = statfsSync(dir);
      if (fs.bavail * fs.bsize >= cap_bytes) return dir;
    } catch {
      // not there or not writable: the next one
    }
  }
  return null;
}

let instances = 0;

/**
 * A fresh file path for this server's cache of cap_bytes, or null when no directory has room
 * for it. Files that servers no longer running left behind (a process killed before it could
 * remove its own) are removed first.
 */
export function newCachePath(cap_bytes: number): string | null {
  for (const dir of new Set(["/dev/shm", tmpdir()])) removeStale(dir);
  const dir = cacheDir(cap_bytes);
  if (dir === null) {
    process.stderr.write(`mashbox: no shared-memory or temp directory has room for --cache-ram; the prompt cache will not survive a worker restart\n`);
    return null;
  }
  return join(dir, `${FILE_PREFIX}${process.pid}-${++instances}`);
}

function removeStale(dir: string): void {
  try {
    for (const name of readdirSync(dir)) {
      const m = name.startsWith(FILE_PREFIX) ? /^(\d+)-/.exec(name.slice(FILE_PREFIX.length)) : null;
      if (!m) continue;
      const pid = Number(m[1]);
      if (pid === process.pid || pidAlive(pid)) continue;
      try {
        unlinkSync(join(dir, name));
      } catch {
        // another server cleaned it up first
      }
    }
  } catch {
    // an unreadable directory only means nothing is cleaned
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * The draft model's cache file beside the model's (native Scheduler: `cache_path + ".draft"`).
 * Its name keeps the pid after FILE_PREFIX, so removeStale cleans it up with the model's.
 */
export function draftCachePath(path: string): string {
  return `${path}.draft`;
}

export function removeCacheFile(path: string): void {
  try {
    if (existsSync(path)) unlinkSync(path);
  } catch {
    // already gone
  }
}

/**
 * The state point of a chat prompt, in characters of its text: where the part that a new
 * conversation of the same client shares ends (the rendered system prompt and tools, before the
 * first user message). It is the common prefix of the full render and a render of the system
 * prompt and tools alone. 0 when the template cannot render that (or shares nothing).
 */
export function statePointChars(chat: ChatPrompt, model: Pick<ModelInfo, "chat_template" | "bos_token" | "eos_token">, text: string): number {
  if (chat.turns.length === 0) return 0;
  let head: string;
  try {
    head = renderChatPrompt({ ...chat, turns: [] }, model, { add_generation_prompt: false });
  } catch {
    return 0; // some templates insist on a user message
  }
  const n = Math.min(head.length, text.length);
  let i = 0;
  while (i < n && head.charCodeAt(i) === text.charCodeAt(i)) i++;
  return i;
}
