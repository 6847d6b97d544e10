// Which model family a chat template belongs to: the one decision behind the output parser
// (./parsers/index.ts), the call openings (./tool-forms.ts) and the tool grammars
// (./tool-grammar.ts). Families are tried in order; the last one takes any template.
//
//   harmony  gpt-oss: channels and recipients (<|start|>, <|channel|>, <|message|>)
//   hermes   everything else: <think> blocks and <tool_call>{json}</tool_call> (ChatML, Qwen,
//            Hermes, and templates without tool support that get the Hermes convention)

export type ToolFamily = "hermes" | "harmony";

/** Whether a chat template speaks harmony (gpt-oss): then its output goes through HarmonyParser. */
export function isHarmonyTemplate(template: string | null): boolean {
  return template !== null && template.includes("<|channel|>") && template.includes("<|message|>") && template.includes("<|start|>");
}

const FAMILIES: { family: ToolFamily; speaks: (template: string | null) => boolean }[] = [
  { family: "harmony", speaks: isHarmonyTemplate },
  { family: "hermes", speaks: () => true },
];

/** The family of a chat template. */
export function toolFamily(template: string | null): ToolFamily {
  return FAMILIES.find((f) => f.speaks(template))!.family;
}
