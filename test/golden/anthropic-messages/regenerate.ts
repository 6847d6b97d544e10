// Fills in the expected outputs of the golden files from the current encoder:
//   npx tsx test/golden/anthropic-messages/regenerate.ts
// Only for a deliberate change of the wire output; read the resulting diff line by line.
import { goldenDir, regenerate } from "../harness.js";
import { dialect } from "./dialect.js";

regenerate(goldenDir(import.meta.url), dialect);
