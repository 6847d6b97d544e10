import type { Context as ApiContext } from "openapi-backend";
import type Koa from "koa";
import type { AppDeps } from "../app/context.js";

/**
 * One per operationId. `api` is openapi-backend's context: the request is already validated, so
 * handlers trust `api.request.requestBody` to have the documented shape.
 */
export type Handler = (api: ApiContext, ctx: Koa.Context, deps: AppDeps) => Promise<void> | void;
