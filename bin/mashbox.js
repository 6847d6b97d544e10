#!/usr/bin/env node
// Entry point. Runs the compiled CLI (dist/, from `npm run build:ts`) when present, otherwise
// the TypeScript sources through tsx, so a fresh checkout works without a build step.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "src", "cli.js");
let cli;
if (existsSync(compiled)) {
  cli = await import(pathToFileURL(compiled).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  cli = await import(pathToFileURL(join(root, "src", "cli.ts")).href);
}
const code = await cli.main(process.argv.slice(2));
process.exit(code);
