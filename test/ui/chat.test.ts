// The --ui page (MASHBOX Chat) in headless Chromium (Debian's `chromium`, driven by
// playwright-core) against a live server on a fixture model. Answers are scripted: the page's
// own /v1/chat/completions requests get the harness's x-test-script header added on their way
// to the real server (page.route), so the real engine streams exactly the text a test names.
import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { rawRequest, scriptHeader, startTestServer, type TestServer } from "../helpers/server.js";

const ARTIFACTS = resolve("test-results/ui");

/** Debian's chromium (or MASHBOX_CHROMIUM). Missing is a failure: .ci/run installs it. */
function chromiumPath(): string {
  const named = process.env.MASHBOX_CHROMIUM;
  if (named) return named;
  for (const name of ["chromium", "chromium-browser"]) {
    try {
      return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim();
    } catch {
      // try the next name
    }
  }
  throw new Error(
    "the UI test needs Chromium and found none: `apt-get install -y chromium` (as .ci/run does) or set MASHBOX_CHROMIUM to a Chromium binary",
  );
}

interface Harness {
  context: BrowserContext;
  page: Page;
  /** What the next answers say (read as each request leaves the page). */
  script: { text: string };
  /** Bodies the page posted to /v1/chat/completions, and the Origin header each carried. */
  posted: any[];
  origins: (string | undefined)[];
  /** Console errors, page errors, dialogs and requests to anything but the server. */
  problems: string[];
}

async function openPage(browser: Browser, s: TestServer, viewport = { width: 1100, height: 760 }): Promise<Harness> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const h: Harness = { context, page, script: { text: "" }, posted: [], origins: [], problems: [] };
  page.on("console", (m) => {
    if (m.type() === "error" && !/status of 401/.test(m.text())) h.problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => h.problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => {
    h.problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  page.on("request", (r) => {
    if (!r.url().startsWith(`${s.url}/`)) h.problems.push(`external request: ${r.url()}`);
  });
  await page.route("**/v1/chat/completions", async (route) => {
    const req = route.request();
    h.posted.push(req.postDataJSON());
    h.origins.push((await req.allHeaders()).origin);
    await route.continue({ headers: { ...req.headers(), ...scriptHeader(h.script.text) } });
  });
  await page.goto(`${s.url}/`);
  return h;
}

const answers = (page: Page) => page.locator("#log .msg.assistant");
const lastAnswer = (page: Page) => answers(page).last();

async function send(h: Harness, message: string, answer: string): Promise<void> {
  h.script.text = answer;
  await h.page.locator("#q").fill(message);
  await h.page.locator("#q").press("Enter");
}

/** Waits for the answer being streamed to finish (Send is enabled again). */
async function settled(page: Page): Promise<void> {
  await page.locator("#send:enabled").waitFor({ timeout: 30000 });
}

async function health(s: TestServer): Promise<{ live_rows: number | null }> {
  return (await fetch(`${s.url}/v1/health`)).json();
}

describe("MASHBOX Chat (--ui) in headless Chromium", function () {
  this.timeout(60000);
  let s: TestServer;
  let browser: Browser;
  let h: Harness;

  before(async () => {
    const executablePath = chromiumPath();
    [s, browser] = await Promise.all([
      startTestServer({ ui: true, slots: 1, ctx: 2048 }),
      // Containers run as root (no sandbox) with a small /dev/shm.
      chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-dev-shm-usage"] }),
    ]);
    h = await openPage(browser, s);
  });
  after(async () => {
    await browser?.close();
    await s?.close();
  });
  afterEach(function () {
    // Any script error, CSP violation, dialog or request leaving the server fails the test.
    const problems = h?.problems.splice(0) ?? [];
    if (problems.length) throw new Error(`the page misbehaved:\n  ${problems.join("\n  ")}`);
  });

  it("is one page with a CSP that admits only its own script and this server", async () => {
    const r = await fetch(`${s.url}/`, { headers: { "accept-encoding": "gzip" } });
    expect(r.status).to.equal(200);
    const csp = r.headers.get("content-security-policy") ?? "";
    expect(csp).to.match(/default-src 'none'/).and.match(/script-src 'sha256-[A-Za-z0-9+/=]+'(;|$)/).and.match(/connect-src 'self'/);
    expect(csp).to.not.match(/unsafe-inline|unsafe-eval|https?:|\*/);
    // Transfer size: the vendored marked and DOMPurify make most of it.
    const raw = await rawRequest(s.port, { path: "/", headers: { host: `127.0.0.1:${s.port}`, "accept-encoding": "gzip" } });
    expect(raw.headers["content-encoding"]).to.equal("gzip");
    expect(Number(raw.headers["content-length"])).to.be.below(48 * 1024);
    // The page's own requests keep the Origin guard: another origin is refused.
    const foreign = await rawRequest(s.port, {
      method: "POST",
      path: "/v1/chat/completions",
      headers: { host: `127.0.0.1:${s.port}`, origin: "http://evil.example", "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "hi" }] }),
    });
    expect(foreign.status).to.equal(403);
    // An inline script the server did not hash is refused by the browser.
    const blocked = await h.page.evaluate(() => {
      try {
        const el = document.createElement("script");
        el.textContent = "window.__injected = 1"; // Trusted Types refuse this string already
        document.body.appendChild(el);
      } catch {
        // refused: what the test wants
      }
      return (window as any).__injected === undefined;
    });
    h.problems.splice(0); // the refusal itself is logged as a console error
    expect(blocked).to.equal(true);
  });

  it("labels its controls and shows keyboard focus", async () => {
    const { page } = h;
    for (const label of ["Message", "System prompt", "Temperature", "Top p", "Max tokens", "API key"]) {
      expect(await page.getByLabel(label, { exact: true }).count(), label).to.equal(1);
    }
    await page.locator("#q").focus();
    await page.keyboard.press("Shift+Tab");
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement!).outlineStyle);
    expect(outline).to.not.equal("none");
  });

  it("streams an answer token by token, then shows tokens and tok/s from timings", async () => {
    const { page } = h;
    // Long enough to span many frames even on a busy machine.
    const answer = Array.from({ length: 150 }, (_, i) => `w${i}`).join(" ");
    // Every rendering of the answer, as the page paints it.
    await page.evaluate(() => {
      (window as any).__seen = [];
      new MutationObserver(() => {
        const all = document.querySelectorAll("#log .msg.assistant .body");
        const last = all[all.length - 1];
        if (last) (window as any).__seen.push(last.textContent);
      }).observe(document.getElementById("log")!, { subtree: true, childList: true, characterData: true });
    });
    h.script.text = answer;
    await page.locator("#q").fill("first line");
    await page.locator("#q").press("Shift+Enter");
    await page.locator("#q").pressSequentially("second line");
    expect(await page.locator("#q").inputValue()).to.equal("first line\nsecond line");
    expect(await page.locator("#log .msg.user").count()).to.equal(0);
    await page.locator("#q").press("Enter");
    await settled(page);
    expect(await page.locator("#log .msg.user .body").innerText()).to.equal("first line\nsecond line");
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal(answer);
    const seen: string[] = await page.evaluate(() => (window as any).__seen);
    const partial = new Set(seen.filter((t) => t && t.length < answer.length && answer.startsWith(t.trim())));
    expect(partial.size, `renderings of a partial answer (of ${seen.length} renderings)`).to.be.greaterThan(0);
    const meta = await lastAnswer(page).locator(".meta").innerText();
    expect(meta).to.match(/\b\d+ prompt tokens\b/).and.match(/\b\d+ generated\b/).and.match(/\d+\.\d tok\/s/);
    expect(Number(/(\d+) generated/.exec(meta)![1])).to.be.greaterThan(10);
    expect(h.posted.at(-1).stream).to.equal(true);
    // The page's requests carry its Origin, which the server's Origin guard checks and admits.
    expect(h.origins.at(-1)).to.equal(s.url);
  });

  it("renders a Markdown answer's code block with a copy button", async () => {
    const { page } = h;
    await send(h, "Show me code", "Here it is:\n\n```js\nconsole.log(40 + 2);\n```\n\nAnd **bold** text.");
    await settled(page);
    const code = lastAnswer(page).locator("pre code");
    expect(await code.innerText()).to.equal("console.log(40 + 2);\n");
    expect(await lastAnswer(page).locator("strong").innerText()).to.equal("bold");
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"]);
    await lastAnswer(page).getByRole("button", { name: "Copy code" }).click();
    expect(await page.evaluate(() => navigator.clipboard.readText())).to.equal("console.log(40 + 2);\n");
  });

  it("puts a reasoning model's thinking in a collapsed section", async () => {
    const { page } = h;
    await send(h, "What is 2 + 2?", "<think>\nTwo and two make four.\n</think>\n\nThe answer is **4**.");
    await settled(page);
    const thinking = lastAnswer(page).locator("details.thinking");
    expect(await thinking.isVisible()).to.equal(true);
    expect(await thinking.evaluate((d) => (d as HTMLDetailsElement).open)).to.equal(false);
    expect(await thinking.locator(".think-body").isVisible()).to.equal(false);
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("The answer is 4.");
    await thinking.locator("summary").click();
    expect(await thinking.locator(".think-body").innerText()).to.equal("Two and two make four.");
  });

  it("keeps <img onerror> and <script> inert text, in a message and in an answer", async () => {
    const { page } = h;
    const evil = `<img src=x onerror="window.__pwned='img';alert(1)"> and <script>window.__pwned='script';alert(2)</script>`;
    // Inline in a paragraph, and as blocks of their own (Markdown's two kinds of raw HTML).
    const block = `<script>window.__pwned='block';alert(3)</script>\n\n<img src=x onerror="alert(4)">`;
    await send(h, `Is this safe? ${evil}`, `Echo: ${evil}\n\n${block}`);
    await settled(page);
    expect(await page.locator("#log .msg.user").last().innerText()).to.include(`<img src=x onerror="window.__pwned='img';alert(1)">`);
    expect(await lastAnswer(page).innerText()).to.include("<script>window.__pwned='script';alert(2)</script>");
    expect(await lastAnswer(page).innerText()).to.include("<script>window.__pwned='block';alert(3)</script>").and.include(`<img src=x onerror="alert(4)">`);
    expect(await page.locator("#log img, #log script").count()).to.equal(0);
    expect(await page.evaluate(() => (window as any).__pwned)).to.equal(undefined);
  });

  it("sends the settings: system prompt, temperature, top_p, max tokens", async () => {
    const { page } = h;
    await page.getByRole("button", { name: "Settings" }).click();
    await page.getByLabel("System prompt").fill("You are terse.");
    await page.getByLabel("Temperature").fill("0.3");
    await page.getByLabel("Top p").fill("0.9");
    await page.getByLabel("Max tokens").fill("64");
    await page.getByRole("button", { name: "Done" }).click();
    await send(h, "Settings?", "Applied.");
    await settled(page);
    const body = h.posted.at(-1);
    expect(body.messages[0]).to.deep.equal({ role: "system", content: "You are terse." });
    expect(body).to.include({ temperature: 0.3, top_p: 0.9, max_tokens: 64 });
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("Applied.");
    // Back to the server's defaults (an empty field sends nothing) for the tests that follow.
    await page.getByRole("button", { name: "Settings" }).click();
    for (const label of ["System prompt", "Temperature", "Top p", "Max tokens"]) await page.getByLabel(label).fill("");
    await page.getByRole("button", { name: "Done" }).click();
  });

  it("Escape stops a long generation: the stream halts and the slot is freed; Regenerate answers again", async () => {
    const { page } = h;
    const long = Array.from({ length: 400 }, (_, i) => `token${i}`).join(" ");
    await send(h, "Go on and on", long);
    const text = lastAnswer(page).locator(".body");
    await page.waitForFunction(() => {
      const all = document.querySelectorAll("#log .msg.assistant .body");
      return (all[all.length - 1]?.textContent ?? "").includes("token3 ");
    });
    expect((await health(s)).live_rows).to.equal(1);
    await page.keyboard.press("Escape");
    await settled(page);
    const stopped = await text.innerText();
    expect(stopped.length).to.be.greaterThan(0).and.below(long.length);
    expect(await lastAnswer(page).locator(".meta").innerText()).to.include("stopped");
    await page.waitForTimeout(400);
    expect(await text.innerText(), "text after Stop").to.equal(stopped);
    const deadline = Date.now() + 10000;
    while ((await health(s)).live_rows !== 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect((await health(s)).live_rows, "slots in use after Stop").to.equal(0);

    h.script.text = "A fresh answer.";
    const before = await answers(page).count();
    await lastAnswer(page).getByRole("button", { name: "Regenerate" }).click();
    await settled(page);
    expect(await answers(page).count()).to.equal(before);
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("A fresh answer.");
    // The regenerated request carries the conversation without the stopped answer, and no
    // sampling settings once they were cleared.
    const body = h.posted.at(-1);
    expect(body.messages.at(-1)).to.deep.equal({ role: "user", content: "Go on and on" });
    expect(body.messages[0].role).to.equal("user");
    expect(body).to.not.have.any.keys("temperature", "top_p", "max_tokens");
  });

  it("keeps conversations across a reload; New chat and delete manage the list", async () => {
    const { page } = h;
    const userCount = await page.locator("#log .msg.user").count();
    await page.reload();
    await page.locator("#log .msg.user").nth(userCount - 1).waitFor();
    expect(await page.locator("#log .msg.user").count()).to.equal(userCount);
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("A fresh answer.");
    expect(await lastAnswer(page).locator(".meta").innerText()).to.match(/tok\/s/);
    expect(await page.locator("#convs li").count()).to.equal(1);

    await page.getByRole("button", { name: "New chat" }).click();
    expect(await page.locator("#log .msg").count()).to.equal(0);
    await send(h, "A second conversation", "Second.");
    await settled(page);
    expect(await page.locator("#convs li").count()).to.equal(2);
    await page.reload();
    expect(await page.locator("#convs li").count()).to.equal(2);
    expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("Second.");
    await page.getByRole("button", { name: "Delete conversation: A second conversation" }).click();
    expect(await page.locator("#convs li").count()).to.equal(1);
    await page.locator("#convs .open").click();
    expect(await page.locator("#log .msg.user").count()).to.equal(userCount);
  });

  it("fits a phone (375 px) without horizontal scrolling; screenshot saved", async () => {
    const phone = await openPage(browser, s, { width: 375, height: 740 });
    try {
      const { page } = phone;
      await send(
        phone,
        "Write a loop, please. A_very_long_unbroken_word_that_could_push_the_page_wider_than_a_phone_screen_if_nothing_wrapped_it",
        "Sure:\n\n```python\nfor i in range(3):\n    print('a line of code that is much longer than a phone is wide', i)\n```\n\nThat prints **three** lines.",
      );
      await settled(page);
      const { scrollWidth, clientWidth } = await page.evaluate(() => ({
        scrollWidth: document.scrollingElement!.scrollWidth,
        clientWidth: document.scrollingElement!.clientWidth,
      }));
      expect(scrollWidth, `scrollWidth ${scrollWidth} > clientWidth ${clientWidth}`).to.be.at.most(clientWidth);
      mkdirSync(ARTIFACTS, { recursive: true });
      const shot = join(ARTIFACTS, "chat-375px.png");
      await page.screenshot({ path: shot });
      await h.page.screenshot({ path: join(ARTIFACTS, "chat-desktop.png") });
      console.log(`      screenshots: ${shot}, ${join(ARTIFACTS, "chat-desktop.png")}`);
      expect(existsSync(shot)).to.equal(true);
      // The conversation list is a drawer at this width.
      const list = page.locator("#convs");
      expect(await list.isVisible()).to.equal(false);
      await page.getByRole("button", { name: "Chats" }).click();
      await page.locator("#convs .open").waitFor({ state: "visible" });
      await page.locator("#convs .open").click();
      await list.waitFor({ state: "hidden" });
      expect(phone.problems).to.deep.equal([]);
    } finally {
      await phone.context.close();
    }
  });

  describe("behind --api-key-file", () => {
    let keyed: TestServer;
    let dir: string;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), "mashbox-ui-"));
      writeFileSync(join(dir, "keys"), "ui-test-key-7f3a alice\n");
      keyed = await startTestServer({ ui: true, slots: 1, ctx: 512, api_keys_file: join(dir, "keys") });
    });
    after(async () => {
      await keyed?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it("asks for the key on 401, then answers; the key stays in sessionStorage only", async () => {
      const k = await openPage(browser, keyed);
      try {
        const { page } = k;
        await send(k, "Hello behind a key", "Authorized answer.");
        const dialog = page.locator("#key-dialog");
        await dialog.waitFor({ state: "visible" });
        await page.getByLabel("API key for this server").fill("wrong-key");
        await page.getByRole("button", { name: "Use key" }).click();
        await page.locator("#key-note", { hasText: "refused" }).waitFor();
        await page.getByLabel("API key for this server").fill("ui-test-key-7f3a");
        await page.getByRole("button", { name: "Use key" }).click();
        await settled(page);
        expect((await lastAnswer(page).locator(".body").innerText()).trim()).to.equal("Authorized answer.");
        const stored = await page.evaluate(() => ({ session: sessionStorage.getItem("mashbox.api_key"), local: JSON.stringify(localStorage) }));
        expect(stored.session).to.equal("ui-test-key-7f3a");
        expect(stored.local).to.not.include("ui-test-key-7f3a");
        expect(k.problems).to.deep.equal([]);
      } finally {
        await k.context.close();
      }
    });
  });
});
