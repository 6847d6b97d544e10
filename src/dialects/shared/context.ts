// What a dialect gets besides the request body. Dialect-neutral: every route fills these the
// same way (src/handlers/), and each dialect stamps them in its own wire names.

/** Per-request facts that do not come from the body: the answer's id and the API key's tenant. */
export interface RequestContext {
  id: string;
  /** Tenant of the API key (per-tenant queue limit); undefined without keys. */
  tenant?: string;
}

/** What an answer is stamped with: its id (chatcmpl-…, msg_…, resp_…) and the served model id. */
export interface RenderContext {
  id: string;
  /** The model id this server runs; used when the request names none. */
  model_id: string;
}

/** OpenAI Chat and Completions objects also carry their creation time, in unix seconds. */
export interface CreatedRenderContext extends RenderContext {
  created: number;
}
