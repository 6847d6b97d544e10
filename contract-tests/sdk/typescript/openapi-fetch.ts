// Calls a live mashbox through openapi-fetch, typed by the openapi-typescript types of
// openapi.json (src/generated/types.ts): every path, body and answer below is checked by
// tsc --strict against the contract. openapi-fetch.ts BASE_URL MODEL_ID.
import createClient from "openapi-fetch";
import type { components, paths } from "../../../src/generated/types.js";
import { Checks, expect, sseData } from "./checks.js";

type Schemas = components["schemas"];

const [base, modelId] = process.argv.slice(2) as [string, string];
// JSON answers only: the 200s of the generating routes also describe their text/event-stream form.
const client = createClient<paths, "application/json">({ baseUrl: base });
const checks = new Checks("openapi-fetch");
const question = "Name three planets.";

await checks.run("listModels", async () => {
  const { data, error } = await client.GET("/v1/models");
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  expect(data.data.length === 1 && data.data[0]!.id === modelId, `models ${JSON.stringify(data.data)}`);
});

await checks.run("createChatCompletion", async () => {
  const { data, error } = await client.POST("/v1/chat/completions", {
    body: { model: modelId, messages: [{ role: "user", content: question }], max_tokens: 8 },
  });
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  expect(data.object === "chat.completion" && typeof data.choices[0]!.message.content === "string", `answer ${JSON.stringify(data)}`);
  expect(data.usage.completion_tokens >= 1 && data.usage.completion_tokens <= 8, `usage ${JSON.stringify(data.usage)}`);
});

await checks.run("createChatCompletion logprobs 400", async () => {
  const { data, error, response } = await client.POST("/v1/chat/completions", { body: { messages: [{ role: "user", content: question }], logprobs: true } });
  expect(data === undefined && response.status === 400, `status ${response.status}`);
  expect(error?.error.param === "logprobs" && error.error.code === "unsupported_field", `error ${JSON.stringify(error)}`);
});

await checks.run("createCompletion", async () => {
  const { data, error } = await client.POST("/v1/completions", { body: { prompt: "Once upon a time", max_tokens: 8 } });
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  expect(data.object === "text_completion" && typeof data.choices[0]!.text === "string", `answer ${JSON.stringify(data)}`);
});

await checks.run("createMessage", async () => {
  const { data, error } = await client.POST("/v1/messages", { body: { max_tokens: 8, messages: [{ role: "user", content: question }] } });
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  const first = data.content[0]!;
  expect(data.id.startsWith("msg_") && first.type === "text" && first.text.length > 0, `answer ${JSON.stringify(data)}`);
});

await checks.run("countMessageTokens", async () => {
  const { data, error } = await client.POST("/v1/messages/count_tokens", { body: { messages: [{ role: "user", content: question }] } });
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  expect(data.input_tokens > 0, `input_tokens ${data.input_tokens}`);
});

await checks.run("createResponse", async () => {
  const { data, error } = await client.POST("/v1/responses", { body: { input: question, max_output_tokens: 8 } });
  expect(data !== undefined, `error ${JSON.stringify(error)}`);
  const last = data.output[data.output.length - 1]!;
  expect(data.id.startsWith("resp_") && last.type === "message" && last.content[0]!.text.length > 0, `answer ${JSON.stringify(data)}`);
  expect(data.usage != null && data.usage.output_tokens >= 1, `usage ${JSON.stringify(data.usage)}`);
});

// Streams: openapi-typescript writes types, not decoders, so each data line is parsed and typed
// as the route's event union, and tsc --strict checks every narrowing below against the contract.
await checks.run("createChatCompletion stream", async () => {
  const body: Schemas["ChatCompletionRequest"] = { messages: [{ role: "user", content: question }], max_tokens: 8, stream: true };
  let text = "";
  let finished = false;
  for await (const data of sseData(`${base}/v1/chat/completions`, body)) {
    const event = JSON.parse(data) as Schemas["ChatCompletionStreamPayload"];
    expect(!("error" in event), `error ${data}`);
    for (const c of event.choices) {
      text += c.delta.content ?? "";
      finished ||= c.finish_reason != null;
    }
  }
  expect(text !== "" && finished, `text ${JSON.stringify(text)}, finished ${finished}`);
});

await checks.run("createMessage stream", async () => {
  const body: Schemas["AnthropicMessagesRequest"] = { max_tokens: 8, messages: [{ role: "user", content: question }], stream: true };
  const kinds: string[] = [];
  let text = "";
  for await (const data of sseData(`${base}/v1/messages`, body)) {
    const event = JSON.parse(data) as Schemas["AnthropicStreamEvent"];
    kinds.push(event.type);
    if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
  }
  expect(kinds[0] === "message_start" && kinds.at(-1) === "message_stop" && text !== "", `events ${kinds.join(",")}, text ${JSON.stringify(text)}`);
});

await checks.run("createResponse stream", async () => {
  const body: Schemas["ResponsesRequest"] = { input: question, max_output_tokens: 8, stream: true };
  const kinds: string[] = [];
  let text = "";
  for await (const data of sseData(`${base}/v1/responses`, body)) {
    const event = JSON.parse(data) as Schemas["ResponsesStreamEvent"];
    kinds.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  expect(kinds[0] === "response.created" && ["response.completed", "response.incomplete"].includes(kinds.at(-1)!) && text !== "", `events ${kinds.join(",")}, text ${JSON.stringify(text)}`);
});

process.exitCode = checks.failed ? 1 : 0;
