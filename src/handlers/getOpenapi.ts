import type { Handler } from "./types.js";

/** GET /openapi.json: the contract, with the running model's id filled in (done once at start). */
export const handler: Handler = (_api, ctx, deps) => {
  ctx.status = 200;
  ctx.body = deps.openapi_document;
};
