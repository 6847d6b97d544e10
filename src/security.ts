// Who may talk to the server: the DNS-rebinding guard (Host), the browser guard (Origin), the
// JSON-only body rule and API keys with tenants. Everything here runs before routing, so a
// refused request never reaches a handler or the engine.
import type Koa from "koa";
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { hostname, networkInterfaces } from "node:os";
import { ApiError } from "./errors.js";
import { bareHost, isLoopback } from "./config.js";
import { STATE } from "./app/context.js";
import { operations, type OperationId } from "./generated/operations.js";
import { absoluteAuthority } from "./http/route.js";

export interface KeyFileEntry {
  key: string;
  /** Tenant the key belongs to: its name in the file, or a per-key tenant when unnamed. */
  tenant: string;
}

/**
 * Parses a key file: one key per line, optionally followed by whitespace and a tenant name;
 * `#` at the start of a line or after whitespace starts a comment (a `#` inside a key is kept,
 * so a generated key is never silently cut short). Keys that share a name share a tenant; an
 * unnamed key is a tenant of its own, named by its line so the key itself never becomes a label.
 */
export function parseKeyFile(text: string, source = "key file"): KeyFileEntry[] {
  const out: KeyFileEntry[] = [];
  const seen = new Map<string, string>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.replace(/(^|\s)#.*$/, "").trim();
    if (line === "") return;
    const m = /^(\S+)(?:\s+(.+))?$/.exec(line)!;
    const key = m[1];
    const tenant = m[2] !== undefined ? `tenant:${m[2].trim()}` : `key@line${i + 1}`;
    const before = seen.get(key);
    if (before !== undefined && before !== tenant) throw new Error(`${source}: line ${i + 1} repeats a key with another tenant`);
    seen.set(key, tenant);
    out.push({ key, tenant });
  });
  return out;
}

/** The configured keys, kept only as SHA-256 digests. */
export class ApiKeys {
  private readonly entries: { digest: Buffer; tenant: string }[];
  constructor(entries: KeyFileEntry[]) {
    this.entries = entries.map((e) => ({ digest: sha256(e.key), tenant: e.tenant }));
  }
  get size(): number {
    return this.entries.length;
  }
  /**
   * The tenant of `presented`, or null. Both sides are hashed first so every comparison has the
   * same length, and every key is compared (no early exit), so the time taken says nothing
   * about which key, or how much of one, matched.
   */
  match(presented: string): string | null {
    const d = sha256(presented);
    let tenant: string | null = null;
    for (const e of this.entries) {
      if (timingSafeEqual(d, e.digest) && tenant === null) tenant = e.tenant;
    }
    return tenant;
  }
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s, "utf8").digest();
}

/** Keys from --api-key-file and MASHBOX_API_KEY together; null when neither gives one. */
export function loadApiKeys(opts: { file?: string; env_key?: string }): ApiKeys | null {
  const entries: KeyFileEntry[] = [];
  if (opts.file) {
    let text: string;
    try {
      text = readFileSync(opts.file, "utf8");
    } catch (e) {
      throw new Error(`cannot read --api-key-file ${opts.file}: ${(e as Error).message}`);
    }
    const parsed = parseKeyFile(text, opts.file);
    if (parsed.length === 0) throw new Error(`--api-key-file ${opts.file} holds no key`);
    entries.push(...parsed);
  }
  const env = opts.env_key?.trim();
  if (env) entries.push({ key: env, tenant: "env:MASHBOX_API_KEY" });
  return entries.length > 0 ? new ApiKeys(entries) : null;
}

/** The message the server refuses to start with when it would be open to the network. */
export function keysRequiredMessage(host: string): string {
  return (
    `--host ${host} is not a loopback address, so an API key is required: ` +
    `pass --api-key-file FILE (one key per line, optionally followed by a tenant name) or set MASHBOX_API_KEY.`
  );
}

export interface SecurityOptions {
  /** The --host value. */
  host: string;
  /** The port actually listened on (known only after listen when 0 was asked for). */
  port: () => number;
  keys: ApiKeys | null;
  /**
   * --allowed-host: more names the server answers to, on any port. Behind a Service or a gateway
   * the Host header carries their name (and port), not this machine's; keys still apply.
   */
  allowed_hosts?: string[];
  /**
   * --metrics-without-key: /metrics open to scrapers that cannot send a key (the Gateway API
   * endpoint picker). It holds no key, tenant, prompt or user; Host checks still apply.
   */
  metrics_without_key?: boolean;
  /**
   * The operation the router matched for this request (any method), undefined when none. The
   * key decision is taken from it, never from the path: a path the router forgives in another
   * spelling is the same operation, and an unmatched request needs a key too.
   */
  operation: (ctx: Koa.Context) => OperationId | undefined;
}

/** Host header values (lowercase host[:port]) the server answers to. */
export function allowedHosts(host: string, port: number): Set<string> {
  const names = new Set(["localhost", "127.0.0.1", "::1", bareHost(host)]);
  // Bound to every interface: the machine's own addresses and name are legitimate ways to
  // reach it (keys are mandatory there anyway); a rebinding attacker's domain still is not.
  if (bareHost(host) === "0.0.0.0" || bareHost(host) === "::") {
    names.add(hostname().toLowerCase());
    for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) names.add(a.address.toLowerCase());
  }
  const out = new Set<string>();
  for (const n of names) {
    const h = n.includes(":") ? `[${n}]` : n;
    out.add(`${h}:${port}`);
    if (port === 80) out.add(h);
  }
  return out;
}

function hostHeaderCount(raw: string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 4 && raw[i].toLowerCase() === "host") n++;
  return n;
}

/** Whether a request for `id` (undefined: no operation matched) needs a key when keys are configured. */
export function needsKey(id: OperationId | undefined, metrics_without_key = false): boolean {
  if (id === undefined) return true;
  if (id === "getMetrics" && metrics_without_key) return false;
  return operations[id].key;
}

function presentedKeys(ctx: Koa.Context): string[] {
  const out: string[] = [];
  const auth = ctx.get("authorization");
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(auth);
  if (m) out.push(m[1]);
  const x = ctx.get("x-api-key").trim();
  if (x) out.push(x);
  return out;
}

/**
 * Koa middleware: Host guard, Origin guard, then the API key. 
 * Throws ApiError; the server's error middleware renders it in the route's dialect. The key's
 * tenant goes where requestContext() reads it (the engine's per-tenant queue limit).
 */
export function securityMiddleware(opts: SecurityOptions): Koa.Middleware {
  if (!isLoopback(opts.host) && !opts.keys) throw new Error(keysRequiredMessage(opts.host));
  let cachedPort = -1;
  let hosts = new Set<string>();
  const hostsNow = () => {
    const p = opts.port();
    if (p !== cachedPort) {
      cachedPort = p;
      hosts = allowedHosts(opts.host, p);
    }
    return hosts;
  };
  const extraNames = new Set((opts.allowed_hosts ?? []).map(bareHost));
  // host[:port] → whether it names this server: a listed host:port, or an --allowed-host name.
  const answersTo = (hostport: string) => hostsNow().has(hostport) || extraNames.has(bareHost(hostport.replace(/:\d+$/, "")));
  return async (ctx, next) => {
    // Node keeps only the first of repeated Host headers, so a second one (which a proxy in
    // front may have read instead) would pass unseen: refuse the request, as RFC 9112 says.
    if (hostHeaderCount(ctx.req.rawHeaders) > 1) throw new ApiError("invalid_request", "The request has more than one Host header.");
    const host = (ctx.get("host") || "").toLowerCase();
    if (!answersTo(host)) throw new ApiError("forbidden_host");
    // An absolute-form target (`GET http://other/path`) names its own authority, which RFC 9112
    // says a server uses instead of Host: it must name this server too.
    let authority: string | null;
    try {
      authority = absoluteAuthority(ctx.req.url ?? "/");
    } catch {
      throw new ApiError("invalid_request", "The request target is neither a path nor an http(s) URL.");
    }
    if (authority !== null && !answersTo(authority)) throw new ApiError("forbidden_host");

    const origin = ctx.get("origin");
    if (origin) {
      let ok = false;
      try {
        const u = new URL(origin);
        const hostport = u.port ? u.host : `${u.host}:${u.protocol === "https:" ? 443 : 80}`;
        ok = (u.protocol === "http:" || u.protocol === "https:") && answersTo(hostport.toLowerCase());
      } catch {
        ok = false; // "null" (sandboxed frames, file://) and garbage are other origins
      }
      if (!ok) throw new ApiError("forbidden_origin");
    } else if (ctx.get("sec-fetch-site") === "cross-site") {
      throw new ApiError("forbidden_origin");
    }

    if (opts.keys && needsKey(opts.operation(ctx), opts.metrics_without_key)) {
      let tenant: string | null = null;
      for (const k of presentedKeys(ctx)) {
        tenant = opts.keys.match(k);
        if (tenant !== null) break;
      }
      if (tenant === null) {
        ctx.set("WWW-Authenticate", 'Bearer realm="mashbox"');
        throw new ApiError("unauthorized");
      }
      ctx.state[STATE.tenant] = tenant;
    }
    await next();
  };
}

/** POST bodies must be JSON: anything else is 415 before the body is read. */
export function requireJson(ctx: Koa.Context): void {
  const type = (ctx.get("content-type") || "").split(";")[0].trim().toLowerCase();
  if (type !== "application/json") throw new ApiError("unsupported_media_type");
}
