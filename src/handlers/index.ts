// operationId → handler. `satisfies` makes a new operation in openapi.json (hence in
// src/generated/operations.ts) a compile error here until it has a handler.
import type { OperationId } from "../generated/operations.js";
import type { Handler } from "./types.js";
import { handler as getHealth } from "./getHealth.js";
import { handler as getHealthShort } from "./getHealthShort.js";
import { handler as getRoot } from "./getRoot.js";
import { handler as headHealth } from "./headHealth.js";
import { handler as listModels } from "./listModels.js";
import { handler as getModel } from "./getModel.js";
import { handler as createChatCompletion } from "./createChatCompletion.js";
import { handler as createCompletion } from "./createCompletion.js";
import { handler as createMessage } from "./createMessage.js";
import { handler as countMessageTokens } from "./countMessageTokens.js";
import { handler as createResponse } from "./createResponse.js";
import { handler as getMetrics } from "./getMetrics.js";
import { handler as getOpenapi } from "./getOpenapi.js";

export const handlers = {
  getHealth,
  getHealthShort,
  getRoot,
  headHealth,
  listModels,
  getModel,
  createChatCompletion,
  createCompletion,
  createMessage,
  countMessageTokens,
  createResponse,
  getMetrics,
  getOpenapi,
} satisfies Record<OperationId, Handler>;
