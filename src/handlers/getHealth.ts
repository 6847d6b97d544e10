import type { Handler } from "./types.js";
import { healthBody, isReady } from "../http/health.js";

/** GET /v1/health: 200 when ready, 503 (same body, status "loading") before. */
export const handler: Handler = (_api, ctx, deps) => {
  ctx.status = isReady(deps) ? 200 : 503;
  ctx.body = healthBody(deps);
};
