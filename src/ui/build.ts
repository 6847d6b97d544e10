// `npm run build:ui`: writes the assembled chat page where the compiled server looks for it
// (dist/src/ui/chat.html, beside dist/src/http/ui.js's ../ui/).
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { assembleChatPage, packageRoot } from "./assemble.js";

const out = join(packageRoot(), "dist", "src", "ui", "chat.html");
mkdirSync(dirname(out), { recursive: true });
const page = assembleChatPage();
writeFileSync(out, page);
console.log(`chat page: ${out} (${(Buffer.byteLength(page) / 1024).toFixed(1)} KiB)`);
