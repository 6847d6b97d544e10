// `mashbox conformance BASE_URL`: the contract checks of contract-tests/ against any running
// server that claims to implement openapi.json (a mashbox deployment, a mock, a proxy in front of
// either). contract-tests/run.sh is this plus a server it starts itself.
//
// Two parts, one report:
//  - schemathesis (the Python tool pinned in requirements-ci.txt) generates requests from the
//    contract and applies four checks to every answer, streamed ones included;
//  - checks schemathesis cannot express: each stream, sent as its documented example, must end
//    with the event that closes it (a stream cut short validates event by event), and with a key,
//    a request without one must be refused in the documented shape.
//
// A "check" is one (operation, check name) pair; one stdout line per failed pair, then
// "N passed, N failed". Progress goes to stderr so stdout stays a parseable report.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fillModelId, MODEL_ID_PLACEHOLDER } from "../contract/model-id.js";
import { createResponseValidator, readOpenapiDocument } from "../contract/validator.js";

type Json = Record<string, any>;

/** The schemathesis checks of contract-tests/run.sh, in the order schemathesis reports them. */
export const SCHEMATHESIS_CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance"] as const;

export const PHASES = ["examples", "coverage", "fuzzing"] as const;
const DEFAULT_PHASES: readonly string[] = PHASES;

/** schemathesis failure codes (`st explain STnnn`) → the check of ours that raised them. */
const CHECK_OF_CODE: Record<string, string> = {
  ST101: "not_a_server_error",
  ST102: "not_a_server_error",
  ST103: "status_code_conformance",
  ST104: "content_type_conformance",
  ST105: "content_type_conformance",
  ST106: "content_type_conformance",
  ST108: "response_schema_conformance",
  ST109: "response_schema_conformance",
  ST110: "response_schema_conformance",
};

/**
 * The event that closes each streamed route (the product spec's stream grammars). Keyed by path,
 * which the spec fixes, so renaming an operation id cannot silently drop the check.
 */
const STREAM_END: Record<string, { done_data?: string; events?: string[] }> = {
  "/v1/chat/completions": { done_data: "[DONE]" },
  "/v1/completions": { done_data: "[DONE]" },
  "/v1/messages": { events: ["message_stop"] },
  "/v1/responses": { events: ["response.completed", "response.incomplete", "response.failed"] },
};

export interface ConformanceOptions {
  /** Server root, e.g. http://127.0.0.1:8000 (no /v1). */
  base_url: string;
  /** Sent as Authorization: Bearer on every request. */
  api_key?: string;
  /** schemathesis --max-examples: cases per operation and phase. */
  max_examples: number;
  seed: number;
  /** schemathesis phases (default examples, coverage and fuzzing; stateful needs links the contract has none of). */
  phases?: string[];
  /** Only these operation ids (default: every operation of the contract). */
  operations?: string[];
  /** The contract (default: this package's openapi.json). */
  spec_path?: string;
  /** Where schemathesis's output, junit report and the filled contract are kept (default: a temp folder). */
  report_dir?: string;
  /** schemathesis is stopped, and the run fails, after this many seconds. */
  timeout_s: number;
  /** Per-request timeout, seconds. */
  request_timeout_s: number;
  /** schemathesis executable (default: `st` on PATH). */
  schemathesis?: string;
  /** Progress lines (stderr in the CLI). */
  progress?: (line: string) => void;
}

export interface ConformanceResult {
  passed: number;
  /** One line per failed check: "FAIL METHOD PATH check: detail". */
  failures: string[];
  report_dir: string;
}

export class ConformanceSetupError extends Error {}

interface CheckTally {
  passed: number;
  failures: string[];
}

export async function runConformance(opts: ConformanceOptions): Promise<ConformanceResult> {
  const base = opts.base_url.replace(/\/+$/, "");
  if (!/^https?:\/\/[^/]+$/.test(base)) throw new ConformanceSetupError(`BASE_URL must be a server root such as http://127.0.0.1:8000, got '${opts.base_url}'`);
  const progress = opts.progress ?? (() => {});
  const reportDir = opts.report_dir ?? mkdtempSync(join(tmpdir(), "mashbox-conformance-"));
  mkdirSync(reportDir, { recursive: true });

  const raw = opts.spec_path ? (JSON.parse(readFileSync(opts.spec_path, "utf8")) as Json) : readOpenapiDocument();
  const known = operationIds(raw);
  for (const id of opts.operations ?? []) if (!known.has(id)) throw new ConformanceSetupError(`unknown operation id '${id}': the contract has ${[...known].join(", ")}`);

  const tally: CheckTally = { passed: 0, failures: [] };
  const auth: Record<string, string> = opts.api_key ? { authorization: `Bearer ${opts.api_key}` } : {};

  // The contract's examples name the model by a placeholder; fill in the model this server runs
  // so that they reach it (a server with another model id would otherwise answer 404 to all).
  const model = await discoverModel(base, auth, opts.request_timeout_s);
  if (model.unreachable) {
    // Nothing answers there: every generated case would fail the same way.
    return { passed: 0, failures: [`FAIL GET /v1/models request_error: ${base} does not answer (${model.error})`], report_dir: reportDir };
  }
  if (model.error) progress(`conformance: cannot learn the model id (${model.error}); examples keep the placeholder ${MODEL_ID_PLACEHOLDER}`);
  const doc = model.id ? fillModelId(raw, model.id) : raw;
  const filledPath = join(reportDir, "openapi.filled.json");
  writeFileSync(filledPath, JSON.stringify(doc, null, 2));
  progress(`conformance: ${base}, model ${model.id ?? "(unknown)"}; schemathesis with up to ${opts.max_examples} examples per operation, seed ${opts.seed}; reports in ${reportDir}`);

  await schemathesis(opts, base, filledPath, reportDir, tally, progress);
  const selected = (path: string, method: string) => !opts.operations || opts.operations.includes(doc.paths[path]?.[method]?.operationId);
  await streamChecks(doc, base, auth, opts.request_timeout_s, selected, tally);
  if (opts.api_key) await keyCheck(doc, base, opts.request_timeout_s, tally);

  return { passed: tally.passed, failures: tally.failures, report_dir: reportDir };
}

function operationIds(doc: Json): Set<string> {
  const out = new Set<string>();
  for (const item of Object.values<Json>(doc.paths ?? {})) for (const op of Object.values<Json>(item)) if (op?.operationId) out.add(op.operationId);
  return out;
}

async function fetchWithTimeout(url: string, init: RequestInit, timeout_s: number): Promise<Response> {
  return fetch(url, { ...init, signal: AbortSignal.timeout(timeout_s * 1000) });
}

async function discoverModel(base: string, auth: Record<string, string>, timeout_s: number): Promise<{ id?: string; error?: string; unreachable?: boolean }> {
  try {
    const r = await fetchWithTimeout(`${base}/v1/models`, { headers: auth }, timeout_s);
    const body = (await r.json().catch(() => null)) as Json | null;
    const id = body?.data?.[0]?.id;
    if (r.status !== 200 || typeof id !== "string") return { error: `GET /v1/models answered ${r.status} without a model id` };
    return { id };
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return { error: cause?.code ?? cause?.message ?? (e as Error).message, unreachable: true };
  }
}

// ---- schemathesis ----

async function schemathesis(opts: ConformanceOptions, base: string, specPath: string, reportDir: string, tally: CheckTally, progress: (l: string) => void): Promise<void> {
  const junit = join(reportDir, "junit.xml");
  const args = [
    "run", specPath,
    "--url", base,
    "--checks", SCHEMATHESIS_CHECKS.join(","),
    "--phases", (opts.phases ?? DEFAULT_PHASES).join(","),
    "--mode", "all",
    // No --max-time: schemathesis would spend all of it fuzzing again and again; the timeout below is only a guard.
    "--max-examples", String(opts.max_examples),
    "--seed", String(opts.seed),
    // One request at a time: a model server on a small box decodes a few requests together at best.
    "--workers", "1",
    "--request-timeout", String(opts.request_timeout_s),
    "--generation-database", "none",
    "--report", "junit",
    "--report-junit-path", junit,
    "--no-color",
  ];
  if (opts.api_key) args.push("--header", `Authorization: Bearer ${opts.api_key}`);
  for (const id of opts.operations ?? []) args.push("--include-operation-id", id);

  const exe = opts.schemathesis ?? "st";
  const run = await spawnCollect(exe, args, opts.timeout_s * 1000);
  writeFileSync(join(reportDir, "schemathesis.txt"), run.output);
  if (run.spawn_error) {
    throw new ConformanceSetupError(
      run.spawn_error.includes("ENOENT") ? `schemathesis is not installed (${exe} not found): pip install -r requirements-ci.txt (schemathesis==4.32.5)` : `cannot run ${exe}: ${run.spawn_error}`,
    );
  }
  progress(`conformance: schemathesis exit ${run.code}${run.timed_out ? " (stopped: timeout)" : ""}; ${summaryLine(run.output)}`);
  if (run.timed_out) {
    tally.failures.push(`FAIL schemathesis: did not finish within ${opts.timeout_s} s (raise --timeout, or lower --examples)`);
    return;
  }
  let xml: string;
  try {
    xml = readFileSync(junit, "utf8");
  } catch {
    tally.failures.push(`FAIL schemathesis: exited ${run.code} without a report: ${lastLines(run.output)}`);
    return;
  }
  const parsed = parseJunit(xml);
  tally.passed += parsed.passed;
  tally.failures.push(...parsed.failures);
  // Exit 1 = failures found (listed above). Anything else unexplained by the report is a failure too.
  if (run.code !== 0 && parsed.failures.length === 0) tally.failures.push(`FAIL schemathesis: exited ${run.code}: ${lastLines(run.output)}`);
}

function summaryLine(output: string): string {
  return /Test cases:\s*\n\s*(.+)/.exec(output)?.[1]?.trim() ?? "no test case summary";
}

function lastLines(output: string): string {
  return output.trim().split("\n").slice(-3).join(" | ");
}

interface Collected {
  code: number | null;
  output: string;
  timed_out: boolean;
  spawn_error?: string;
}

/** Runs a child asynchronously: the server under test may live in this very process (tests). */
function spawnCollect(cmd: string, args: string[], timeout_ms: number): Promise<Collected> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    let timed_out = false;
    child.stdout!.setEncoding("utf8").on("data", (d: string) => (output += d));
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (output += d));
    const timer = setTimeout(() => {
      timed_out = true;
      child.kill("SIGTERM");
      setTimeout(() => child.kill("SIGKILL"), 5000).unref();
    }, timeout_ms);
    child.once("error", (e) => {
      clearTimeout(timer);
      resolve({ code: null, output, timed_out, spawn_error: e.message });
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output, timed_out });
    });
  });
}

const unescapeXml = (s: string) =>
  s.replace(/&(lt|gt|quot|apos|amp|#(\d+)|#x([0-9a-f]+));/gi, (_m, name: string, dec?: string, hex?: string) =>
    dec ? String.fromCodePoint(Number(dec)) : hex ? String.fromCodePoint(parseInt(hex, 16)) : ({ lt: "<", gt: ">", quot: '"', apos: "'", amp: "&" } as Record<string, string>)[name],
  );

/**
 * schemathesis's junit report: one <testcase> per tested operation, with a <failure> (or <error>)
 * body listing each failing test case as "N. Test Case ID: …" followed by "- STnnn Title" and an
 * indented detail. Every selected check of a tested operation counts once: failed when any test
 * case failed it, passed otherwise.
 */
export function parseJunit(xml: string): { passed: number; failures: string[] } {
  let passed = 0;
  const failures: string[] = [];
  const cases = xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g);
  for (const [, attrs, inner = ""] of cases) {
    const operation = unescapeXml(/\bname="([^"]*)"/.exec(attrs)?.[1] ?? "?");
    const failed = new Map<string, string>(); // check → first failure's detail
    const errors = new Map<string, number>(); // error message → test cases it stopped
    for (const [, kind, body] of inner.matchAll(/<(failure|error)\b[^>]*?(?:\/>|>([\s\S]*?)<\/\1>)/g)) {
      const text = unescapeXml(body ?? "");
      const found = [...text.matchAll(/^- (ST\d+) (.+)\n((?:\s*\n)*)((?: {4}.*\n?)*)/gm)];
      if (kind === "error" || found.length === 0) {
        // A case schemathesis could not complete (connection refused, timeout): no check ran.
        const indented = /^ {4}\s*(\S.*)$/m.exec(text)?.[1];
        const message = [firstLine(text) || kind, indented].filter(Boolean).join(": ");
        errors.set(message, (errors.get(message) ?? 0) + 1);
        continue;
      }
      const caseId = /Test Case ID: (\S+)/.exec(text)?.[1];
      for (const [, code, title, , detailBlock] of found) {
        const check = CHECK_OF_CODE[code] ?? code;
        if (failed.has(check)) continue;
        const detail = firstLine(detailBlock ?? "");
        failed.set(check, `${code} ${title.trim()}${detail ? `: ${detail}` : ""}${caseId ? ` (case ${caseId})` : ""}`);
      }
    }
    // Skipped (no case to run, e.g. filtered out) and nothing else: neither passed nor failed.
    if (failed.size === 0 && errors.size === 0 && /<skipped\b/.test(inner)) continue;
    for (const check of SCHEMATHESIS_CHECKS) {
      const f = failed.get(check);
      if (f) failures.push(`FAIL ${operation} ${check}: ${f}`);
      else if (errors.size === 0) passed += 1;
    }
    for (const [check, f] of failed) if (!(SCHEMATHESIS_CHECKS as readonly string[]).includes(check)) failures.push(`FAIL ${operation} ${check}: ${f}`);
    for (const [message, n] of errors) failures.push(`FAIL ${operation} request_error: ${message} (${n} case${n === 1 ? "" : "s"})`);
  }
  return { passed, failures };
}

function firstLine(text: string): string {
  const line = text.split("\n").map((l) => l.trim()).find((l) => l !== "");
  return line && line.length > 200 ? `${line.slice(0, 200)}…` : (line ?? "");
}

// ---- checks schemathesis cannot express ----

async function streamChecks(
  doc: Json,
  base: string,
  auth: Record<string, string>,
  timeout_s: number,
  selected: (path: string, method: string) => boolean,
  tally: CheckTally,
): Promise<void> {
  const validator = createResponseValidator(doc);
  for (const [path, item] of Object.entries<Json>(doc.paths ?? {})) {
    const op = item.post;
    if (!op?.responses?.["200"]?.content?.["text/event-stream"] || !selected(path, "post")) continue;
    const example = Object.values<Json>(op.requestBody?.content?.["application/json"]?.examples ?? {}).find((e) => e?.value?.stream === true)?.value;
    const name = `FAIL POST ${path} stream_completes`;
    if (!example) {
      tally.failures.push(`${name}: the contract documents a stream but gives no streamed request example`);
      continue;
    }
    const errors = await checkStream(`${base}${path}`, example, auth, timeout_s, (payload, event) => validator.validateSseEvent(op.operationId, payload, event), STREAM_END[path]);
    if (errors.length) tally.failures.push(`${name}: ${errors.slice(0, 3).join("; ")}`);
    else tally.passed += 1;
  }
}

/** Sends `body`, reads the whole text/event-stream answer; the errors found ([] = good). */
export async function checkStream(
  url: string,
  body: Json,
  auth: Record<string, string>,
  timeout_s: number,
  validate: (payload: unknown, event?: string) => string[],
  end: { done_data?: string; events?: string[] } | undefined,
): Promise<string[]> {
  let r: Response;
  let text: string;
  try {
    r = await fetchWithTimeout(url, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify(body) }, timeout_s);
    text = await r.text();
  } catch (e) {
    return [`request failed: ${(e as Error).message}`];
  }
  if (r.status !== 200) return [`answered ${r.status} to the documented streamed example: ${text.slice(0, 160)}`];
  const type = (r.headers.get("content-type") ?? "").split(";")[0].trim();
  if (type !== "text/event-stream") return [`content-type ${type || "(none)"}, not text/event-stream`];

  const errors: string[] = [];
  const events = parseSse(text);
  if (events.length === 0) return ["no event"];
  events.forEach((ev, i) => {
    let payload: unknown = ev.data;
    if (ev.data !== end?.done_data) {
      try {
        payload = JSON.parse(ev.data);
      } catch {
        errors.push(`event ${i}: data is not JSON: ${ev.data.slice(0, 80)}`);
        return;
      }
    }
    for (const e of validate(payload, ev.event)) errors.push(`event ${i}: ${e}`);
  });
  const last = events[events.length - 1];
  if (end?.done_data !== undefined && last.data !== end.done_data) errors.push(`the stream does not end with data: ${end.done_data}`);
  if (end?.events && !end.events.includes(last.event ?? "")) errors.push(`the stream ends with event ${last.event ?? "(unnamed)"}, not ${end.events.join(" / ")}`);
  const doneAt = end?.done_data !== undefined ? events.findIndex((e) => e.data === end.done_data) : -1;
  if (doneAt >= 0 && doneAt !== events.length - 1) errors.push(`events after data: ${end!.done_data}`);
  return errors;
}

/** text/event-stream → events (comments and retry/id fields dropped; data lines joined by \n). */
export function parseSse(text: string): { event?: string; data: string }[] {
  const out: { event?: string; data: string }[] = [];
  for (const block of text.replace(/\r\n?/g, "\n").split(/\n\n+/)) {
    let event: string | undefined;
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length) out.push({ event, data: data.join("\n") });
  }
  return out;
}

/** With a key configured, a request without one must be refused: 401 in the documented shape. */
async function keyCheck(doc: Json, base: string, timeout_s: number, tally: CheckTally): Promise<void> {
  const validator = createResponseValidator(doc);
  const name = "FAIL GET /v1/models refuses_missing_key";
  try {
    const r = await fetchWithTimeout(`${base}/v1/models`, {}, timeout_s);
    const body = await r.json().catch(() => undefined);
    if (r.status !== 401) return void tally.failures.push(`${name}: answered ${r.status} without an API key`);
    const errors = validator.validateJson(doc.paths["/v1/models"].get.operationId, 401, body);
    if (errors.length) return void tally.failures.push(`${name}: ${errors.slice(0, 3).join("; ")}`);
    tally.passed += 1;
  } catch (e) {
    tally.failures.push(`${name}: request failed: ${(e as Error).message}`);
  }
}
