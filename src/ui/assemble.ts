// Builds the --ui page from its sources: src/ui/page.html with src/ui/style.css and one script
// made of the vendored marked and DOMPurify (from node_modules, so the page makes no external
// request) followed by src/ui/app.js. `npm run build:ui` writes the result next to the compiled
// src/http/ui.js; a checkout running from sources assembles it on first use instead.
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** Where the page's model id goes (the only per-server part; it is HTML-escaped). */
export const MODEL_PLACEHOLDER = "{{MODEL_ID}}";

/** The package root: the nearest folder above this module holding package.json (from src/ or dist/src/). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("mashbox: package.json not found above the chat page's module");
    dir = up;
  }
  return dir;
}

/** The page with MODEL_PLACEHOLDER still in it. */
export function assembleChatPage(): string {
  const root = packageRoot();
  const source = (name: string) => readFileSync(join(root, "src", "ui", name), "utf8");
  const require = createRequire(join(root, "package.json"));
  // marked exports no subpaths: its browser build sits beside the module its "." resolves to.
  const files = [join(dirname(require.resolve("marked")), "marked.umd.js"), require.resolve("dompurify/dist/purify.min.js")];
  // The libraries' own source-map comments would point the browser at files never served.
  const vendored = files.map((f) => readFileSync(f, "utf8").replace(/^\/\/# sourceMappingURL=.*$/gm, ""));
  const script = [...vendored, source("app.js")].join("\n;\n");
  const style = source("style.css");
  // An end tag inside the inlined text would end the element early and turn the rest into markup.
  if (/<\/script/i.test(script) || /<\/style/i.test(style)) throw new Error("the chat page's script or style contains its own end tag");
  const page = source("page.html");
  return page.replace("{{STYLE}}", () => style).replace("{{SCRIPT}}", () => script);
}
