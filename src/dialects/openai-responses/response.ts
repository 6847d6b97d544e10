import type { GenerationEvent } from "../../engine/types.js";
import { ApiError } from "../../errors.js";
import { engineError } from "./wire.js";
import { ResponsesStreamEncoder } from "./stream.js";
import type { RenderContext, ResponseObject, ResponsesRequest } from "./types.js";

/**
 * A finished generation's events → the Response object. Built by the stream encoder itself so
 * that a streamed answer's final response.completed and a plain answer can never differ.
 */
export function fromInternal(events: GenerationEvent[], body: ResponsesRequest, rc: RenderContext): ResponseObject {
  const encoder = new ResponsesStreamEncoder(body, rc);
  for (const ev of events) {
    if (ev.type === "error") throw engineError(ev);
    encoder.push(ev);
  }
  const final = encoder.final;
  if (!final) throw new ApiError("engine_error", "The generation ended without a result.");
  return final;
}
