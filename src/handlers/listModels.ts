import { basename } from "node:path";
import type { Handler } from "./types.js";
import type { AppDeps } from "../app/context.js";
import type { components } from "../generated/types.js";
import { serverInfo } from "../http/server-info.js";

type Model = components["schemas"]["OpenAIModel"];

/** The one served model, every documented field filled. */
export function modelObject(deps: AppDeps): Model {
  const m = deps.engine.model;
  const info = serverInfo(deps);
  const out: Model = {
    id: deps.model_id,
    object: "model",
    owned_by: "mashbox-labs",
    created: 0,
    max_model_len: m.n_ctx,
    weights: basename(m.path),
    prefix_cache: info.prefix_cache,
    slots: m.slots,
    cache_ram_mib: info.cache_ram_mib,
    spec: m.spec ?? "off",
    draft_model: m.draft_model ?? null,
  };
  // Size and bits per weight are known only once the worker has mapped the file.
  if (m.file_bytes > 0) out.gb = Math.round((m.file_bytes / 1e9) * 1000) / 1000;
  if (m.bpw > 0) out.bpw = Math.round(m.bpw * 100) / 100;
  return out;
}

/** GET /v1/models */
export const handler: Handler = (_api, ctx, deps) => {
  ctx.status = 200;
  ctx.body = { object: "list", data: [modelObject(deps)] };
};
