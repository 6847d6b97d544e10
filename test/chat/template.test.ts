import { expect } from "chai";
import { readFileSync } from "node:fs";
import { promptOpensThinking, renderChatPrompt, templateSupportsTools } from "../../src/chat/template.js";
import type { ChatPrompt } from "../../src/engine/types.js";
import { ApiError } from "../../src/errors.js";

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), "utf8");
const SMOL = { chat_template: fixture("smollm2.jinja"), bos_token: "<|im_start|>", eos_token: "<|im_end|>" };
const QWEN = { chat_template: fixture("qwen-tools.jinja"), bos_token: null, eos_token: "<|im_end|>" };
const QWEN3 = { chat_template: fixture("qwen3-think.jinja"), bos_token: null, eos_token: "<|im_end|>" };

const WEATHER = { name: "get_weather", description: "Weather for a city", kind: "function" as const, parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

function chat(p: Partial<ChatPrompt>): ChatPrompt {
  return { system: [], turns: [], tools: [], tool_choice: { type: "auto" }, ...p };
}

const TOOL_HISTORY = chat({
  system: ["Be brief."],
  tools: [WEATHER],
  turns: [
    { role: "user", content: "Weather in Paris and Rome?" },
    {
      role: "assistant",
      content: "",
      thinking: "two cities",
      tool_calls: [
        { id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { id: "call_2", name: "get_weather", arguments: '{"city":"Rome"}' },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: "18C" },
    { role: "tool", tool_call_id: "call_2", content: "25C" },
  ],
});

describe("renderChatPrompt", () => {
  it("continues a trailing assistant message (prefill) instead of closing it", () => {
    const prefilled = renderChatPrompt(chat({ turns: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Sure, here is" }] }), SMOL);
    expect(prefilled).to.equal(renderChatPrompt(chat({ turns: [{ role: "user", content: "Hi" }] }), SMOL) + "Sure, here is");
    expect(prefilled.endsWith("<|im_start|>assistant\nSure, here is")).to.equal(true);
    // a trailing assistant tool call is history, not a prefill
    const called = renderChatPrompt(
      chat({ tools: [WEATHER], turns: [{ role: "user", content: "Hi" }, { role: "assistant", content: "", tool_calls: [{ id: "c", name: "get_weather", arguments: "{}" }] }] }),
      QWEN,
    );
    expect(called.endsWith("<|im_start|>assistant\n")).to.equal(true);
    expect(called).to.include("<tool_call>");
  });

  it("renders SmolLM2's own template, with its default system turn", () => {
    expect(renderChatPrompt(chat({ turns: [{ role: "user", content: "Hi" }] }), SMOL)).to.equal(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  it("joins every system text into the one system turn", () => {
    const out = renderChatPrompt(
      chat({ system: ["A.", "B."], turns: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Yo" }, { role: "user", content: "Bye" }] }),
      SMOL,
      { add_generation_prompt: false },
    );
    expect(out).to.equal("<|im_start|>system\nA.\n\nB.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
  });

  it("puts tools into the system prompt in the Hermes convention when the template has none", () => {
    expect(templateSupportsTools(SMOL.chat_template)).to.equal(false);
    const out = renderChatPrompt(TOOL_HISTORY, SMOL);
    const sig = JSON.stringify({ type: "function", function: { name: "get_weather", description: "Weather for a city", parameters: WEATHER.parameters } });
    expect(out).to.contain(`<|im_start|>system\nBe brief.\n\n# Tools\n`);
    expect(out).to.contain(`<tools>\n${sig}\n</tools>`);
    expect(out).to.contain("<tool_call>\n{\"name\": \"<function name>\"");
    expect(out).to.contain(
      '<|im_start|>assistant\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Rome"}}\n</tool_call><|im_end|>\n',
    );
    // Both results in one user turn, then the new assistant turn.
    expect(out).to.match(/<\|im_start\|>user\n<tool_response>\n18C\n<\/tool_response>\n<tool_response>\n25C\n<\/tool_response><\|im_end\|>\n<\|im_start\|>assistant\n$/);
    // SmolLM2's template has no reasoning field: earlier thinking is not replayed.
    expect(out).to.not.contain("two cities");
  });

  it("does not offer tools with tool_choice none, and asks for a call when required or named", () => {
    expect(renderChatPrompt({ ...TOOL_HISTORY, tool_choice: { type: "none" } }, SMOL)).to.not.contain("<tools>");
    expect(renderChatPrompt({ ...TOOL_HISTORY, tool_choice: { type: "required" } }, SMOL)).to.contain("You must call at least one");
    expect(renderChatPrompt({ ...TOOL_HISTORY, tool_choice: { type: "tool", name: "get_weather" } }, SMOL)).to.contain('You must call the function "get_weather"');
  });

  it("hands tools and tool calls to a template that renders them itself", () => {
    expect(templateSupportsTools(QWEN.chat_template)).to.equal(true);
    const out = renderChatPrompt(TOOL_HISTORY, QWEN);
    expect(out).to.equal(
      [
        "<|im_start|>system",
        "Be brief.",
        "",
        "# Tools",
        "<tools>",
        // tojson spaces its output like Python json.dumps
        '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}',
        "</tools>",
        'Call a tool with <tool_call>{"name": <name>, "arguments": <object>}</tool_call>.<|im_end|>',
        "<|im_start|>user",
        "Weather in Paris and Rome?<|im_end|>",
        "<|im_start|>assistant",
        "<tool_call>",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "</tool_call>",
        "<tool_call>",
        '{"name": "get_weather", "arguments": {"city": "Rome"}}',
        "</tool_call><|im_end|>",
        "<|im_start|>user",
        "<tool_response>",
        "18C",
        "</tool_response>",
        "<tool_response>",
        "25C",
        "</tool_response><|im_end|>",
        "<|im_start|>assistant",
        "",
      ].join("\n"),
    );
  });

  it("replays reasoning_content and passes enable_thinking to a Qwen3-style template", () => {
    const out = renderChatPrompt(TOOL_HISTORY, QWEN3);
    expect(out).to.contain("<|im_start|>assistant\n<think>\ntwo cities\n</think>\n<tool_call>");
    expect(out.endsWith("<|im_start|>assistant\n")).to.equal(true);
    const off = renderChatPrompt({ ...chat({ turns: [{ role: "user", content: "Hi" }] }), enable_thinking: false }, QWEN3);
    expect(off.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).to.equal(true);
    expect(promptOpensThinking(off)).to.equal(false);
  });

  it("falls back to ChatML without a template", () => {
    const out = renderChatPrompt(chat({ system: ["S"], turns: [{ role: "user", content: "Hi" }] }), { chat_template: null, bos_token: null, eos_token: null });
    expect(out).to.equal("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  });

  it("turns raise_exception into a 400", () => {
    const t = { chat_template: "{{ raise_exception('no system role') }}", bos_token: null, eos_token: null };
    expect(() => renderChatPrompt(chat({ turns: [{ role: "user", content: "x" }] }), t)).to.throw(ApiError, /no system role/);
  });

  it("folds the system text into the first user turn for a template without a system role", () => {
    const t = {
      chat_template:
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}",
      bos_token: null,
      eos_token: null,
    };
    expect(renderChatPrompt(chat({ system: ["Be brief."], turns: [{ role: "user", content: "Hi" }] }), t)).to.equal("<user>Be brief.\n\nHi</user>");
  });

  it("drops a template-printed BOS when the tokenizer adds one", () => {
    const t = { chat_template: "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}", bos_token: "<s>", eos_token: "</s>" };
    const c = chat({ turns: [{ role: "user", content: "x" }] });
    expect(renderChatPrompt(c, t)).to.equal("<s>[user]x");
    expect(renderChatPrompt(c, t, { add_bos: true })).to.equal("[user]x");
  });

  it("knows when the prompt leaves <think> open", () => {
    expect(promptOpensThinking("<|im_start|>assistant\n<think>\n")).to.equal(true);
    expect(promptOpensThinking("<|im_start|>assistant\n")).to.equal(false);
    expect(promptOpensThinking("<think>\n\n</think>\n\n")).to.equal(false);
  });
});
