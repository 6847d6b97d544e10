import type { Handler } from "./types.js";
import { isReady } from "../http/health.js";

/** HEAD (every path): 200 when ready, 503 while loading, never a body. */
export const handler: Handler = (_api, ctx, deps) => {
  // Body first: koa turns a null body into 204 unless the status is set after it.
  ctx.body = null;
  ctx.status = isReady(deps) ? 200 : 503;
};
