// Fills in the expected outputs of the golden files from the current encoders:
//   npx tsx test/golden/openai-completions/regenerate.ts
// Only for a deliberate change of the wire output; read the resulting diff line by line.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ApiError } from "../../../src/errors.js";
import { CompletionStreamEncoder, fromInternal } from "../../../src/dialects/openai-completions/index.js";

const dir = dirname(fileURLToPath(import.meta.url));
for (const name of readdirSync(dir).filter((f) => f.endsWith(".json"))) {
  const golden = JSON.parse(readFileSync(join(dir, name), "utf8"));
  let response: unknown;
  try {
    response = fromInternal(golden.events, golden.render);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    response = { status: e.status("openai"), error: e.body("openai") };
  }
  const enc = new CompletionStreamEncoder(golden.render, { include_usage: golden.request.stream_options?.include_usage === true });
  const stream = golden.events.flatMap((ev: never) => enc.push(ev));
  writeFileSync(join(dir, name), JSON.stringify({ ...golden, response, stream }, null, 2) + "\n");
}
