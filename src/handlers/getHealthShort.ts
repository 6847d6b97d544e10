import type { Handler } from "./types.js";
import { handler as getHealth } from "./getHealth.js";

/** GET /health: the same answer as GET /v1/health. */
export const handler: Handler = (api, ctx, deps) => getHealth(api, ctx, deps);
