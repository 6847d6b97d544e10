// The words of a forced call's dead-end 400: the tool it names and where it stopped, for both
// call shapes the grammars write (a JSON object, and harmony's call message on gpt-oss).
import { expect } from "chai";
import { callSoFar, deadEndReason } from "../../src/engine/grammar-pool.js";

describe("forced-call dead ends: which tool, and where", () => {
  it("a JSON call names its tool once the name is whole", () => {
    expect(callSoFar('{"name": "get_weather", "arguments": {"city": [[')).to.deep.equal({ tool: "get_weather", args: '{"city": [[' });
    expect(callSoFar('{"name": "get_wea')).to.equal(null);
  });

  it("a harmony call message names its tool, and its tags stay out of the reason", () => {
    const text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": [[';
    expect(callSoFar(text)).to.deep.equal({ tool: "get_weather", args: '{"city": [[' });
    const r = deadEndReason("grammar: too ambiguous (over 4096 parse stacks)", text);
    expect(r.tool).to.equal("get_weather");
    expect(r.reason).to.contain('after the arguments "{\\"city\\": [["');
    expect(r.reason).to.not.contain("<|");
  });
});
