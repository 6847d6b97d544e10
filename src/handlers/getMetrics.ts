import type { Handler } from "./types.js";

/** GET /metrics: Prometheus text exposition format. */
export const handler: Handler = async (_api, ctx, deps) => {
  const text = await deps.metrics_text();
  ctx.status = 200;
  ctx.type = "text/plain; version=0.0.4; charset=utf-8";
  ctx.body = text;
};
