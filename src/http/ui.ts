// The --ui page (MASHBOX Chat): one self-contained HTML document, its style and script inline, so
// it works offline and makes no request but to this server's own /v1/chat/completions. Its
// sources are src/ui/ (marked and DOMPurify vendored from node_modules); `npm run build:ui`
// assembles them into ../ui/chat.html beside the compiled module, and a checkout running from
// sources assembles them on first use.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { assembleChatPage, MODEL_PLACEHOLDER } from "../ui/assemble.js";

export interface ChatPage {
  html: Buffer;
  /** The same bytes gzip-compressed (the vendored libraries make most of the page). */
  gzip: Buffer;
  /** Content-Security-Policy: the page's own script and style by hash, nothing from elsewhere. */
  csp: string;
}

let template: string | null = null;
const pages = new Map<string, ChatPage>();

function pageTemplate(): string {
  if (template === null) {
    const built = fileURLToPath(new URL("../ui/chat.html", import.meta.url));
    template = existsSync(built) ? readFileSync(built, "utf8") : assembleChatPage();
  }
  return template;
}

const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`;

/** The CSP admitting exactly the inline <script> and <style> elements of `html`. */
export function contentSecurityPolicy(html: string): string {
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => sha256(m[1]));
  const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => sha256(m[1]));
  return [
    "default-src 'none'",
    `script-src ${scripts.join(" ")}`,
    `style-src ${styles.join(" ")}`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    // Markup reaches the DOM only as DOMPurify's TrustedHTML (src/ui/app.js).
    "require-trusted-types-for 'script'",
    "trusted-types dompurify",
  ].join("; ");
}

/** The page for a server running `model_id` (built once per id). */
export function chatPage(model_id: string): ChatPage {
  let page = pages.get(model_id);
  if (!page) {
    const esc = model_id.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    const text = pageTemplate().replace(MODEL_PLACEHOLDER, () => esc);
    const html = Buffer.from(text, "utf8");
    page = { html, gzip: gzipSync(html, { level: 9 }), csp: contentSecurityPolicy(text) };
    pages.set(model_id, page);
  }
  return page;
}
