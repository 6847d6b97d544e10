// One spelling per path. The router (openapi-backend) forgives some spellings of a path (a
// doubled leading slash, trailing slashes) and not others, so a decision taken on the raw path
// — which operation this is, whether it needs a key, which error shape it speaks — could
// disagree with what the router then runs. Every request is therefore rewritten to its
// canonical path before anything looks at it, and the operation is matched once, on that path.

/** Characters RFC 3986 calls unreserved: percent-encoding them does not change the URI. */
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * RFC 3986 §6.2.2 normalisation of a request path: unreserved characters decoded, the
 * remaining escapes upper-cased, dot segments removed (§5.2.4, never above the root), and empty
 * segments (`//`, a trailing `/`) dropped. Other escapes stay encoded, so `%2F` is never a `/`.
 */
export function canonicalPath(raw: string): string {
  const decoded = raw.replace(/%[0-9A-Fa-f]{2}/g, (m) => {
    const c = String.fromCharCode(parseInt(m.slice(1), 16));
    return UNRESERVED.test(c) ? c : m.toUpperCase();
  });
  const out: string[] = [];
  for (const seg of decoded.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  return "/" + out.join("/");
}

/**
 * The authority of an absolute-form request target (`GET http://host:port/path`), lowercased
 * host[:port] with the scheme's default port filled in; null for origin-form (`/path`).
 * Throws on a target that is neither (`*`, garbage, another scheme).
 */
export function absoluteAuthority(target: string): string | null {
  if (target.startsWith("/")) return null;
  const u = new URL(target);
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`request target of scheme ${u.protocol}`);
  return (u.port ? u.host : `${u.host}:${u.protocol === "https:" ? 443 : 80}`).toLowerCase();
}
