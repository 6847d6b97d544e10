import type { Handler } from "./types.js";
import { ApiError } from "../errors.js";
import { modelObject } from "./listModels.js";

/** GET /v1/models/{model}: the served model, 404 for any other id. */
export const handler: Handler = (api, ctx, deps) => {
  const id = String(api.request.params.model ?? "");
  if (id !== deps.model_id) {
    throw new ApiError("model_not_found", `The model '${id.slice(0, 200)}' does not exist; this server runs '${deps.model_id}'.`, { param: "model" });
  }
  ctx.status = 200;
  ctx.body = modelObject(deps);
};
