// Calls a live mashbox through the typescript-fetch client openapi-generator made from
// openapi.json. run.mjs copies this file next to the generated client (./client/), checks both
// with tsc --strict and runs it: typescript-fetch.ts BASE_URL MODEL_ID.
import {
  AnthropicMessagesRequestToJSON,
  AnthropicStreamEventFromJSON,
  ChatApi,
  ChatCompletionRequestToJSON,
  ChatCompletionStreamPayloadFromJSON,
  CompletionsApi,
  Configuration,
  instanceOfChatCompletionChunk,
  MessagesApi,
  ModelsApi,
  ResponseError,
  ResponsesApi,
  ResponsesRequestToJSON,
  ResponsesStreamEventFromJSON,
} from "./client/index";
import { Checks, expect, sseData } from "./checks";

const [base, modelId] = process.argv.slice(2) as [string, string];
const config = new Configuration({ basePath: base });
const checks = new Checks("openapi-generator-typescript-fetch");
const question = "Name three planets.";

await checks.run("listModels", async () => {
  const list = await new ModelsApi(config).listModels();
  expect(list.data.length === 1 && list.data[0]!.id === modelId, `models ${JSON.stringify(list.data)}`);
});

await checks.run("createChatCompletion", async () => {
  const out = await new ChatApi(config).createChatCompletion({
    chatCompletionRequest: { model: modelId, messages: [{ role: "user", content: question }], maxTokens: 8 },
  });
  expect(out.object === "chat.completion" && out.id.startsWith("chatcmpl-"), `answer ${JSON.stringify(out)}`);
  expect(typeof out.choices[0]!.message.content === "string", "content is text");
  expect(out.usage.completionTokens >= 1 && out.usage.completionTokens <= 8, `usage ${JSON.stringify(out.usage)}`);
});

await checks.run("createChatCompletion logprobs 400", async () => {
  const err = await new ChatApi(config).createChatCompletion({ chatCompletionRequest: { messages: [{ role: "user", content: question }], logprobs: true } }).catch((e: unknown) => e);
  expect(err instanceof ResponseError && err.response.status === 400, `expected a 400, got ${String(err)}`);
  const body = (await err.response.json()) as { error: { param: string } };
  expect(body.error.param === "logprobs", `param ${body.error.param}`);
});

await checks.run("createCompletion", async () => {
  const out = await new CompletionsApi(config).createCompletion({ textCompletionRequest: { prompt: "Once upon a time", maxTokens: 8 } });
  expect(out.object === "text_completion" && typeof out.choices[0]!.text === "string", `answer ${JSON.stringify(out)}`);
});

await checks.run("createMessage", async () => {
  const out = await new MessagesApi(config).createMessage({
    anthropicMessagesRequest: { maxTokens: 8, messages: [{ role: "user", content: question }] },
  });
  const first = out.content[0]!;
  expect(out.id.startsWith("msg_") && first.type === "text" && first.text.length > 0, `answer ${JSON.stringify(out)}`);
  expect(out.usage.outputTokens >= 1 && out.usage.outputTokens <= 8, `usage ${JSON.stringify(out.usage)}`);
});

await checks.run("countMessageTokens", async () => {
  const out = await new MessagesApi(config).countMessageTokens({ anthropicCountTokensRequest: { messages: [{ role: "user", content: question }] } });
  expect(out.inputTokens > 0, `input_tokens ${out.inputTokens}`);
});

await checks.run("createResponse", async () => {
  const out = await new ResponsesApi(config).createResponse({ responsesRequest: { input: question, maxOutputTokens: 8 } });
  const last = out.output[out.output.length - 1]!;
  expect(out.id.startsWith("resp_") && last.type === "message" && last.content[0]!.text.length > 0, `answer ${JSON.stringify(out)}`);
  expect(out.usage != null && out.usage.outputTokens >= 1 && out.usage.outputTokens <= 8, `usage ${JSON.stringify(out.usage)}`);
});

// Streams: the body is written by the generated ToJSON (camelCase fields to wire names), each data
// line read by the generated union's FromJSON; a line no branch recognizes decodes to {} (no
// type), which fails the check.
await checks.run("createChatCompletion stream", async () => {
  let text = "";
  let finished = false;
  for await (const data of sseData(`${base}/v1/chat/completions`, ChatCompletionRequestToJSON({ messages: [{ role: "user", content: question }], maxTokens: 8, stream: true }))) {
    const event = ChatCompletionStreamPayloadFromJSON(JSON.parse(data));
    expect(instanceOfChatCompletionChunk(event), `not a chunk: ${data}`);
    for (const c of event.choices) {
      text += c.delta.content ?? "";
      finished ||= c.finishReason != null;
    }
  }
  expect(text !== "" && finished, `text ${JSON.stringify(text)}, finished ${finished}`);
});

await checks.run("createMessage stream", async () => {
  const kinds: string[] = [];
  let text = "";
  for await (const data of sseData(`${base}/v1/messages`, AnthropicMessagesRequestToJSON({ maxTokens: 8, messages: [{ role: "user", content: question }], stream: true }))) {
    const event = AnthropicStreamEventFromJSON(JSON.parse(data));
    expect(typeof event.type === "string", `no branch: ${data}`);
    kinds.push(event.type);
    if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
  }
  expect(kinds[0] === "message_start" && kinds.at(-1) === "message_stop" && text !== "", `events ${kinds.join(",")}, text ${JSON.stringify(text)}`);
});

await checks.run("createResponse stream", async () => {
  const kinds: string[] = [];
  let text = "";
  for await (const data of sseData(`${base}/v1/responses`, ResponsesRequestToJSON({ input: question, maxOutputTokens: 8, stream: true }))) {
    const event = ResponsesStreamEventFromJSON(JSON.parse(data));
    expect(typeof event.type === "string", `no branch: ${data}`);
    kinds.push(event.type);
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  expect(kinds[0] === "response.created" && ["response.completed", "response.incomplete"].includes(kinds.at(-1)!) && text !== "", `events ${kinds.join(",")}, text ${JSON.stringify(text)}`);
});

process.exitCode = checks.failed ? 1 : 0;
