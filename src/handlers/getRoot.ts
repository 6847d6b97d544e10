import type { Handler } from "./types.js";
import { handler as getHealth } from "./getHealth.js";
import { serverInfo } from "../http/server-info.js";
import { chatPage } from "../http/ui.js";

/** GET /: the health object, or with --ui the built-in chat page. */
export const handler: Handler = (api, ctx, deps) => {
  if (!serverInfo(deps).ui) return getHealth(api, ctx, deps);
  const page = chatPage(deps.model_id);
  ctx.status = 200;
  ctx.type = "text/html; charset=utf-8";
  ctx.set("Content-Security-Policy", page.csp);
  ctx.set("X-Content-Type-Options", "nosniff");
  ctx.set("Referrer-Policy", "no-referrer");
  ctx.set("Cache-Control", "no-cache");
  ctx.vary("Accept-Encoding");
  if (ctx.acceptsEncodings("gzip", "identity") === "gzip") {
    ctx.set("Content-Encoding", "gzip");
    ctx.body = page.gzip;
  } else {
    ctx.body = page.html;
  }
};
