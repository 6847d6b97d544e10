import type { Handler } from "./types.js";
import { handler as getHealth } from "./getHealth.js";
import { serverInfo } from "../http/server-info.js";
import { chatPageHtml } from "../http/ui.js";

/** GET /: the health object, or with --ui the built-in chat page. */
export const handler: Handler = (api, ctx, deps) => {
  if (!serverInfo(deps).ui) return getHealth(api, ctx, deps);
  ctx.status = 200;
  ctx.type = "text/html; charset=utf-8";
  ctx.body = chatPageHtml(deps.model_id);
};
