import { expect } from "chai";
import { ApiError } from "../../../src/errors.js";
import { toInternal, type MessagesRequest } from "../../../src/dialects/anthropic-messages/index.js";
import { capturedRequests } from "../../clients/captured.js";

const ctx = { id: "req-1" };
const user = (content: any) => ({ role: "user" as const, content });

function rejects(body: unknown, param: string, code = "invalid_request"): ApiError {
  try {
    toInternal(body as MessagesRequest, ctx);
  } catch (e) {
    expect(e).to.be.instanceOf(ApiError);
    const err = e as ApiError;
    expect(err.param, err.message).to.equal(param);
    expect(err.code).to.equal(code);
    expect(err.status("anthropic")).to.equal(400);
    expect(err.message).to.include(param);
    return err;
  }
  return expect.fail(`accepted a request that should name ${param}`);
}

describe("anthropic-messages toInternal", () => {
  describe("every captured client request is accepted", () => {
    const captured = capturedRequests((r) => r.path === "/v1/messages" || r.path === "/v1/messages/count_tokens");
    it("finds the captured Claude Code, Pi and SDK requests", () => {
      expect(captured.length).to.be.greaterThan(50);
      for (const stem of ["requests-claude", "requests-claude-latest", "requests-pi-anthropic", "requests-sdk-anthropic0", "tool/", "think/"]) {
        expect(captured.some((r) => r.file.includes(stem)), stem).to.equal(true);
      }
    });
    for (const r of captured) {
      it(r.where, () => {
        const body = r.body as MessagesRequest;
        const req = toInternal(body, ctx);
        expect(req.input.kind).to.equal("chat");
        if (req.input.kind !== "chat") return;
        const chat = req.input.chat;
        // Every client tool is offered, every message lands somewhere.
        expect(chat.tools.map((t) => t.name)).to.deep.equal((body.tools ?? []).map((t) => t.name));
        const systemMessages = body.messages.filter((m) => m.role === "system").length;
        const systemBlocks = typeof body.system === "string" ? 1 : (body.system ?? []).length;
        // Claude Code's billing-header block stays out of the prompt (docs/PROMPT-RULES.md)
        const billing = Array.isArray(body.system) && /^x-anthropic-billing-header: /.test(body.system[0]?.text ?? "") ? 1 : 0;
        expect(chat.system.length).to.equal(systemBlocks - billing + systemMessages);
        expect(chat.system.some((t) => t.includes("x-anthropic-billing-header"))).to.equal(false);
        expect(chat.turns.length).to.be.at.least(body.messages.length - systemMessages);
        // Every replayed tool call is answered by a tool turn that names it.
        const calls = chat.turns.flatMap((t) => (t.role === "assistant" ? (t.tool_calls ?? []) : []));
        for (const call of calls) {
          const answer = chat.turns.find((t) => t.role === "tool" && t.tool_call_id === call.id);
          expect(answer, call.id).to.not.equal(undefined);
          expect((answer as { name?: string }).name).to.equal(call.name);
          expect(JSON.parse(call.arguments)).to.be.an("object");
        }
        if (body.thinking?.type === "adaptive") expect(chat.enable_thinking).to.equal(true);
        expect(req.max_tokens).to.equal(body.max_tokens ?? null);
        expect(req.sampling.temperature).to.equal(body.temperature ?? 0);
      });
    }
  });

  it("leaves Claude Code's billing-header block out of the prompt, in exactly its form and place", () => {
    const system = (blocks: string[]) => {
      const req = toInternal({ system: blocks.map((text) => ({ type: "text" as const, text })), messages: [user("hi")] }, ctx);
      if (req.input.kind !== "chat") return expect.fail();
      return req.input.chat.system;
    };
    for (const v of ["2.1.197.123", "2.1.197.8a5", "2.1.332.0b8"])
      expect(system([`x-anthropic-billing-header: cc_version=${v}; cc_entrypoint=sdk-cli;`, "You are a Claude agent."])).to.deep.equal(["You are a Claude agent."]);
    // anything else that looks like it is the client's own text, kept as sent
    const kept = [
      "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli; and more",
      "x-anthropic-billing-header: cc_version=2.1.197.12g; cc_entrypoint=sdk-cli;",
      "Note: x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;",
    ];
    for (const k of kept) expect(system([k, "B"])).to.deep.equal([k, "B"]);
    // only as the first block
    const header = "x-anthropic-billing-header: cc_version=2.1.197.123; cc_entrypoint=sdk-cli;";
    expect(system(["A", header])).to.deep.equal(["A", header]);
  });

  it("collects system text from `system` (string or blocks) and role:system messages, in order", () => {
    const req = toInternal(
      { system: [{ type: "text", text: "A" }, { type: "text", text: "B" }], messages: [user("hi"), { role: "system", content: "C" }, user([{ type: "text", text: "x" }, { type: "text", text: "y" }])] },
      ctx,
    );
    if (req.input.kind !== "chat") return expect.fail();
    expect(req.input.chat.system).to.deep.equal(["A", "B", "C"]);
    expect(req.input.chat.turns).to.deep.equal([
      { role: "user", content: "hi" },
      { role: "user", content: "xy" },
    ]);
    const plain = toInternal({ system: "S", messages: [user("hi")] }, ctx);
    if (plain.input.kind !== "chat") return expect.fail();
    expect(plain.input.chat.system).to.deep.equal(["S"]);
  });

  it("replays assistant thinking, text and tool_use, then tool_result turns in place", () => {
    const req = toInternal(
      {
        messages: [
          user("run it"),
          {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "plan", signature: "sig" },
              { type: "redacted_thinking", data: "opaque" },
              { type: "text", text: "ok" },
              { type: "tool_use", id: "toolu_1", name: "bash", input: { command: "ls" } },
            ],
          },
          user([
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "a.txt" }] },
            { type: "text", text: "thanks" },
          ]),
        ],
        tools: [{ name: "bash", input_schema: { type: "object" } }, { name: "web_search", type: "web_search_20250305" }],
      },
      ctx,
    );
    if (req.input.kind !== "chat") return expect.fail();
    expect(req.input.chat.turns).to.deep.equal([
      { role: "user", content: "run it" },
      { role: "assistant", content: "ok", thinking: "plan", tool_calls: [{ id: "toolu_1", name: "bash", arguments: '{"command":"ls"}' }] },
      { role: "tool", tool_call_id: "toolu_1", name: "bash", content: "a.txt" },
      { role: "user", content: "thanks" },
    ]);
    // Hosted tools are accepted but not offered.
    expect(req.input.chat.tools).to.deep.equal([{ name: "bash", parameters: { type: "object" }, kind: "function" }]);
  });

  it("maps tool_choice auto / any / tool / none", () => {
    const tools = [{ name: "bash", input_schema: { type: "object" } }];
    const choice = (tool_choice: any) => {
      const req = toInternal({ messages: [user("x")], tools, tool_choice }, ctx);
      return req.input.kind === "chat" ? req.input.chat.tool_choice : null;
    };
    expect(choice(undefined)).to.deep.equal({ type: "auto" });
    expect(choice({ type: "auto" })).to.deep.equal({ type: "auto" });
    expect(choice({ type: "any" })).to.deep.equal({ type: "required" });
    expect(choice({ type: "none" })).to.deep.equal({ type: "none" });
    expect(choice({ type: "tool", name: "bash" })).to.deep.equal({ type: "tool", name: "bash" });
    rejects({ messages: [user("x")], tools, tool_choice: { type: "tool", name: "nope" } }, "tool_choice.name");
  });

  it("maps thinking enabled / adaptive / disabled / absent onto enable_thinking", () => {
    const think = (thinking: any) => {
      const req = toInternal({ messages: [user("x")], ...(thinking ? { thinking } : {}) }, ctx);
      return req.input.kind === "chat" ? req.input.chat.enable_thinking : "n/a";
    };
    expect(think({ type: "enabled", budget_tokens: 1024 })).to.equal(true);
    expect(think({ type: "adaptive" })).to.equal(true);
    expect(think({ type: "disabled" })).to.equal(false);
    expect(think(undefined)).to.equal(undefined);
  });

  it("refuses media blocks with 400 naming the field", () => {
    rejects({ messages: [user([{ type: "text", text: "see" }, { type: "image", source: {} }])] }, "messages[0].content[1]", "unsupported_field");
    rejects({ messages: [user([{ type: "document", source: {} }])] }, "messages[0].content[0]", "unsupported_field");
    rejects(
      { messages: [user([{ type: "tool_result", tool_use_id: "t", content: [{ type: "image", source: {} }] }])] },
      "messages[0].content[0].content[0]",
      "unsupported_field",
    );
  });

  it("marks a failed tool_result (is_error) so the model reads the failure", () => {
    const req = toInternal(
      {
        messages: [
          user("run it"),
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "bash", input: {} }] },
          user([{ type: "tool_result", tool_use_id: "toolu_1", content: "exit 1", is_error: true }]),
        ],
      },
      ctx,
    );
    if (req.input.kind !== "chat") return expect.fail();
    expect(req.input.chat.turns[2]).to.deep.equal({ role: "tool", tool_call_id: "toolu_1", name: "bash", content: "Error: exit 1" });
  });

  it("refuses output_config.format but ignores effort and metadata", () => {
    rejects({ messages: [user("x")], output_config: { format: { type: "json_schema" } } }, "output_config.format", "unsupported_field");
    expect(() => toInternal({ messages: [user("x")], output_config: { effort: "high" }, metadata: { user_id: "u" } }, ctx)).to.not.throw();
  });

  it("applies token budget precedence, stop precedence and sampling defaults", () => {
    expect(toInternal({ messages: [user("x")] }, ctx).max_tokens).to.equal(null);
    expect(toInternal({ messages: [user("x")], max_tokens: 10 }, ctx).max_tokens).to.equal(10);
    expect(toInternal({ messages: [user("x")], max_tokens: 10, max_completion_tokens: 5 }, ctx).max_tokens).to.equal(5);
    expect(toInternal({ messages: [user("x")], stop_sequences: ["a"] }, ctx).stop).to.deep.equal(["a"]);
    expect(toInternal({ messages: [user("x")], stop: "b", stop_sequences: ["a"] }, ctx).stop).to.deep.equal(["b"]);
    const req = toInternal({ messages: [user("x")], top_k: 5, seed: 7 }, ctx);
    expect(req.sampling).to.deep.equal({ temperature: 0, top_p: 1, top_k: 5, min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0, seed: 7 });
  });

  it("carries the id and tenant from the context", () => {
    const req = toInternal({ messages: [user("x")], prompt_cache_key: "pck" }, { id: "r9", tenant: "t" });
    expect(req).to.include({ id: "r9", tenant: "t" });
  });
});
