// The registry of output parsers: one per model family (../family.ts), each in its own file
// behind the OutputParser interface (./common.ts). The engine's output stage asks for the
// template's parser here and never names a family.
import { toolFamily, type ToolFamily } from "../family.js";
import type { OutputParser, ParserOptions } from "./common.js";
import { HarmonyParser } from "./harmony.js";
import { HermesParser } from "./hermes.js";

export type { OutputParser, ParserOptions } from "./common.js";

/** Every family has a parser (a family without one does not compile). */
const PARSERS: Record<ToolFamily, new (opts: ParserOptions) => OutputParser> = {
  hermes: HermesParser,
  harmony: HarmonyParser,
};

/** The output parser of a family. */
export function parserOf(family: ToolFamily, opts: ParserOptions): OutputParser {
  return new PARSERS[family](opts);
}

/** The output parser for a model's chat template. */
export function parserFor(template: string | null, opts: ParserOptions): OutputParser {
  return parserOf(toolFamily(template), opts);
}
