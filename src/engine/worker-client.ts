// The parent's side of the model worker (worker.ts): spawns it, talks to it over IPC (commands,
// events, tokenize calls answered by rid), notices when it dies or reports a fault, and starts
// it again. A worker fault and a worker crash are the same thing here: the process is gone and
// a fresh one loads the model. After MAX_FAILED_RESTARTS deaths in a row (no generation finished
// and no minute of health in between) it stops trying and reports the cause, so the process
// can exit and let its supervisor replace it.
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { ApiError } from "../errors.js";
import type { NativeEvent, NativeLoadOptions, NativeModelInfo, NativeStats } from "./native.js";
import type { FromWorker, ToWorker, WorkerReject } from "./worker.js";
import { notReadyError } from "./readiness.js";

/** Worker deaths in a row before giving up. */
export const MAX_FAILED_RESTARTS = 3;
/** A worker up this long after its load counts as a successful restart. */
const HEALTHY_AFTER_MS = 60_000;

export interface WorkerListener {
  /** The (re)started worker has loaded the model. */
  ready(info: NativeModelInfo): void;
  events(evs: (NativeEvent | WorkerReject)[], stats: NativeStats): void;
  stats(stats: NativeStats): void;
  /** The model file's sha256 (identity.ts), once the worker has it: after ready on a first hash. */
  identity(component_set_sha: string): void;
  /** The worker died or faulted; a new one is being started. */
  down(cause: string): void;
  /** The very first load failed (a bad model file): nothing is restarted. */
  load_failed(message: string): void;
  /** Restarts kept failing: nothing more is tried. */
  gave_up(cause: string): void;
}

export class WorkerClient {
  private child: ChildProcess | null = null;
  private nextRid = 1;
  private replies = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  private everReady = false;
  private failedInARow = 0;
  private healthyTimer: NodeJS.Timeout | null = null;
  /** What the current worker reported before it went away (a fault or a failed load). */
  private cause: string | null = null;
  private closing = false;
  /** Times a worker was started again after a fault. */
  restarts = 0;

  constructor(
    private readonly load: NativeLoadOptions,
    private readonly on: WorkerListener,
  ) {
    this.spawn();
  }

  /** The worker's pid while one runs. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  send(m: ToWorker): void {
    const c = this.child;
    if (c && c.connected) c.send(m);
  }

  /** Prompt tokens of `text` as the worker's tokenizer counts them. */
  tokenize(text: string, add_special: boolean, parse_special: boolean, literal: number[] = []): Promise<number> {
    const rid = this.nextRid++;
    return new Promise<unknown>((resolve, reject) => {
      this.replies.set(rid, { resolve, reject });
      this.send({ t: "tokenize", rid, text, add_special, parse_special, ...(literal.length > 0 ? { literal } : {}) });
    }) as Promise<number>;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.clearHealthyTimer();
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    await new Promise<void>((res) => {
      c.once("exit", () => res());
      c.kill("SIGTERM");
    });
  }

  private spawn(): void {
    const here = dirname(fileURLToPath(import.meta.url));
    const isTs = import.meta.url.endsWith(".ts");
    const child = fork(join(here, isTs ? "worker.ts" : "worker.js"), [], {
      execArgv: isTs ? ["--import", "tsx"] : [],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      serialization: "advanced",
    });
    this.child = child;
    this.cause = null;
    child.on("message", (m: FromWorker) => this.onMessage(child, m));
    child.on("exit", (code, signal) => this.onExit(child, code, signal));
    child.on("error", () => {}); // exit follows
    this.send({ t: "load", opts: this.load });
  }

  private onMessage(child: ChildProcess, m: FromWorker): void {
    if (child !== this.child) return;
    switch (m.t) {
      case "ready":
        this.everReady = true;
        this.clearHealthyTimer();
        this.healthyTimer = setTimeout(() => (this.failedInARow = 0), HEALTHY_AFTER_MS);
        this.healthyTimer.unref();
        this.on.stats(m.stats);
        this.on.ready(m.info);
        break;
      case "load_error":
        if (!this.everReady) {
          this.closing = true;
          this.on.load_failed(m.message);
        } else this.cause = `the model failed to load again: ${m.message}`;
        child.kill();
        break;
      case "fault":
        // The worker exits right after this message; its exit restarts it.
        this.cause = m.message;
        break;
      case "reply": {
        const r = this.replies.get(m.rid);
        if (!r) return;
        this.replies.delete(m.rid);
        if (m.ok) r.resolve(m.value);
        else r.reject(new ApiError("invalid_request", m.message));
        break;
      }
      case "events":
        if (m.evs.some((e) => e.type === "done")) this.failedInARow = 0;
        this.on.events(m.evs, m.stats);
        break;
      case "stats":
        this.on.stats(m.stats);
        break;
      case "identity":
        this.on.identity(m.component_set_sha);
        break;
    }
  }

  private onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (child !== this.child) return;
    this.child = null;
    this.clearHealthyTimer();
    for (const r of this.replies.values()) r.reject(notReadyError("restarting"));
    this.replies.clear();
    if (this.closing) return;
    const cause = this.cause ?? `the model's worker exited (${signal ?? `code ${code}`})`;
    this.failedInARow++;
    if (this.failedInARow >= MAX_FAILED_RESTARTS) {
      this.closing = true;
      this.on.gave_up(`${cause}; the worker failed ${this.failedInARow} times in a row`);
      return;
    }
    if (this.everReady) this.restarts++;
    process.stderr.write(`mashbox: ${cause}; starting it again\n`);
    this.on.down(cause);
    this.spawn();
  }

  private clearHealthyTimer(): void {
    if (this.healthyTimer) clearTimeout(this.healthyTimer);
    this.healthyTimer = null;
  }
}
