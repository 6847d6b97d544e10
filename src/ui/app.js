// MASHBOX Chat: the --ui page's script. Plain browser JavaScript, inlined into the page after the
// vendored marked and DOMPurify (see src/ui/assemble.ts); the CSP admits this script by hash only.
// Every piece of HTML that reaches the DOM is Markdown rendered by marked with raw HTML escaped,
// then sanitized by DOMPurify (as a TrustedHTML, since the CSP requires Trusted Types).
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const CHATS_KEY = "mashbox.chats.v1";
  const CURRENT_KEY = "mashbox.current.v1";
  const SETTINGS_KEY = "mashbox.settings.v1";
  const API_KEY = "mashbox.api_key";

  // ---- Markdown → sanitized DOM ----------------------------------------------------------------
  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  // Raw HTML inside Markdown is shown as text: a message that says <img onerror=…> is about HTML,
  // it is not a request to render it.
  const shownHtml = (token) => {
    const text = escapeHtml(token.text.replace(/\n+$/, ""));
    return token.block ? `<p>${text.replace(/\n/g, "<br>")}</p>\n` : text;
  };
  marked.use({ gfm: true, breaks: true, renderer: { html: shownHtml } });
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
  const PURIFY = { RETURN_TRUSTED_TYPE: true, FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select"], FORBID_ATTR: ["style"] };

  function renderMarkdown(el, text) {
    el.innerHTML = DOMPurify.sanitize(marked.parse(text, { async: false }), PURIFY);
    for (const pre of el.querySelectorAll("pre")) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "copy";
      b.textContent = "Copy";
      b.setAttribute("aria-label", "Copy code");
      b.addEventListener("click", () => copyText(pre.querySelector("code")?.textContent ?? pre.textContent, b));
      pre.appendChild(b);
    }
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // Plain http to a non-loopback host is not a secure context: no Clipboard API there.
      const t = document.createElement("textarea");
      t.value = text;
      document.body.appendChild(t);
      t.select();
      document.execCommand("copy");
      t.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1200);
  }

  // ---- Stored state -----------------------------------------------------------------------------
  const load = (key, fallback) => {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v ?? fallback;
    } catch {
      return fallback;
    }
  };
  let chats = load(CHATS_KEY, []);
  if (!Array.isArray(chats)) chats = [];
  let current = chats.find((c) => c.id === localStorage.getItem(CURRENT_KEY)) ?? null;
  const settings = Object.assign({ system: "", temperature: "", top_p: "", max_tokens: "" }, load(SETTINGS_KEY, {}));

  function saveChats() {
    try {
      localStorage.setItem(CHATS_KEY, JSON.stringify(chats));
      if (current) localStorage.setItem(CURRENT_KEY, current.id);
      else localStorage.removeItem(CURRENT_KEY);
    } catch (e) {
      console.warn("could not save the conversations", e);
    }
  }

  // ---- Elements ---------------------------------------------------------------------------------
  const log = $("log"), q = $("q"), send = $("send"), stop = $("stop"), empty = $("empty");
  $("model").textContent = document.querySelector('meta[name="mashbox-model"]').content;

  // ---- Conversation list ------------------------------------------------------------------------
  function renderList() {
    const ul = $("convs");
    ul.replaceChildren();
    for (const c of [...chats].sort((a, b) => b.updated - a.updated)) {
      const li = document.createElement("li");
      if (c === current) li.setAttribute("aria-current", "true");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title || "New chat";
      open.title = c.title || "New chat";
      open.addEventListener("click", () => {
        if (busy) return;
        current = c;
        saveChats();
        renderAll();
        document.body.classList.remove("sidebar-open");
        q.focus();
      });
      const del = document.createElement("button");
      del.type = "button";
      del.className = "del";
      del.textContent = "✕";
      del.setAttribute("aria-label", `Delete conversation: ${c.title || "New chat"}`);
      del.addEventListener("click", () => {
        if (busy && c === current) return;
        chats = chats.filter((x) => x !== c);
        if (current === c) current = null;
        saveChats();
        renderAll();
      });
      li.append(open, del);
      ul.appendChild(li);
    }
  }

  // ---- Messages ---------------------------------------------------------------------------------
  function messageView(m) {
    const div = document.createElement("div");
    div.className = `msg ${m.role}`;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = m.role === "user" ? "You" : "Model";
    const thinking = document.createElement("details");
    thinking.className = "thinking";
    thinking.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Thinking";
    const thinkBody = document.createElement("div");
    thinkBody.className = "think-body";
    thinking.append(summary, thinkBody);
    const body = document.createElement("div");
    body.className = "body";
    const meta = document.createElement("div");
    meta.className = "meta";
    div.append(who, thinking, body, meta);
    const view = { div, body, meta, thinking, thinkBody, summary };
    updateView(view, m);
    return view;
  }

  function updateView(v, m) {
    if (m.reasoning) {
      v.thinking.hidden = false;
      // Reasoning is shown as plain text: it is never parsed as HTML.
      v.thinkBody.textContent = m.reasoning;
    }
    renderMarkdown(v.body, m.content || "");
    v.div.classList.toggle("error", Boolean(m.error));
    if (m.error) {
      const e = document.createElement("p");
      e.textContent = m.error;
      v.body.appendChild(e);
    }
  }

  function metaLine(m, isLast) {
    const parts = [];
    const t = m.timings;
    if (t) {
      // prompt_n counts only the tokens computed for this answer; cache_n came from the cache.
      const prompt = t.prompt_n + (t.cache_n ?? 0);
      parts.push(`${prompt} prompt ${prompt === 1 ? "token" : "tokens"}${t.cache_n ? ` (${t.cache_n} cached)` : ""}`, `${t.predicted_n} generated`);
      if (t.predicted_per_second != null) parts.push(`${t.predicted_per_second.toFixed(1)} tok/s`);
    }
    if (m.stopped) parts.push("stopped");
    const out = parts.map((p) => {
      const s = document.createElement("span");
      s.textContent = p;
      return s;
    });
    if (isLast && m.role === "assistant") {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "regen";
      b.textContent = "Regenerate";
      b.disabled = busy;
      b.addEventListener("click", regenerate);
      out.push(b);
    }
    return out;
  }

  function renderAll() {
    renderList();
    log.replaceChildren();
    const msgs = current?.messages ?? [];
    if (msgs.length === 0) log.appendChild(empty);
    msgs.forEach((m, i) => {
      const v = messageView(m);
      v.meta.replaceChildren(...metaLine(m, i === msgs.length - 1));
      log.appendChild(v.div);
    });
    log.scrollTop = log.scrollHeight;
  }

  // ---- Talking to the server --------------------------------------------------------------------
  let busy = false;
  let controller = null;

  function setBusy(b) {
    busy = b;
    send.disabled = b;
    stop.disabled = !b;
    for (const r of log.querySelectorAll(".regen")) r.disabled = b;
  }

  function requestBody(messages) {
    const body = { messages: [], stream: true };
    if (settings.system.trim()) body.messages.push({ role: "system", content: settings.system });
    for (const m of messages) if (!m.error || m.content) body.messages.push({ role: m.role, content: m.content });
    const num = (s) => (s === "" || s == null || Number.isNaN(Number(s)) ? undefined : Number(s));
    if (num(settings.temperature) !== undefined) body.temperature = num(settings.temperature);
    if (num(settings.top_p) !== undefined) body.top_p = num(settings.top_p);
    if (num(settings.max_tokens) !== undefined) body.max_tokens = Math.trunc(num(settings.max_tokens));
    return body;
  }

  async function post(body, signal) {
    const headers = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem(API_KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    return fetch("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body), signal });
  }

  /** Streams the answer to `current`'s messages into a new assistant message. */
  async function generate() {
    const chat = current;
    const history = chat.messages.slice();
    const answer = { role: "assistant", content: "" };
    chat.messages.push(answer);
    log.querySelectorAll(".regen").forEach((b) => b.remove());
    empty.remove();
    const v = messageView(answer);
    v.body.classList.add("cursor");
    log.appendChild(v.div);
    log.scrollTop = log.scrollHeight;
    setBusy(true);
    controller = new AbortController();
    let frame = 0;
    const paint = () => {
      frame = 0;
      const stick = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
      updateView(v, answer);
      if (stick) log.scrollTop = log.scrollHeight;
    };
    try {
      let r = await post(requestBody(history), controller.signal);
      while (r.status === 401) {
        const key = await askForKey(sessionStorage.getItem(API_KEY) ? "That key was refused. Try another." : "");
        if (!key) throw new Error("The server needs an API key.");
        r = await post(requestBody(history), controller.signal);
      }
      if (!r.ok) {
        const j = await r.json().catch(() => ({}));
        throw new Error(j.error?.message ?? `${r.status} ${r.statusText}`);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]" || data === "") continue;
            const c = JSON.parse(data);
            if (c.error) throw new Error(c.error.message ?? "The server reported an error.");
            const delta = c.choices?.[0]?.delta;
            if (delta?.reasoning_content) answer.reasoning = (answer.reasoning ?? "") + delta.reasoning_content;
            if (delta?.content) answer.content += delta.content;
            if (c.timings) answer.timings = c.timings;
            if (!frame) frame = requestAnimationFrame(paint);
          }
        }
      }
    } catch (e) {
      if (e.name === "AbortError") answer.stopped = true;
      else answer.error = String(e.message ?? e);
    } finally {
      if (frame) cancelAnimationFrame(frame);
      controller = null;
      setBusy(false);
      v.body.classList.remove("cursor");
      chat.updated = Date.now();
      saveChats();
      if (chat === current) {
        updateView(v, answer);
        v.meta.replaceChildren(...metaLine(answer, true));
        log.scrollTop = log.scrollHeight;
      }
      renderList();
    }
  }

  function submit() {
    const text = q.value;
    if (busy || text.trim() === "") return;
    if (!current) {
      current = { id: crypto.randomUUID?.() ?? String(Date.now()) + Math.random(), title: "", messages: [], updated: Date.now() };
      chats.push(current);
    }
    if (!current.title) current.title = text.trim().split("\n")[0].slice(0, 60);
    current.messages.push({ role: "user", content: text });
    q.value = "";
    autosize();
    renderAll();
    generate();
  }

  function regenerate() {
    if (busy || !current) return;
    const msgs = current.messages;
    if (msgs.length && msgs[msgs.length - 1].role === "assistant") msgs.pop();
    if (!msgs.length) return;
    renderAll();
    generate();
  }

  function stopGeneration() {
    controller?.abort();
  }

  // ---- API key ----------------------------------------------------------------------------------
  /** Opens the key dialog; resolves with the key (stored for this tab) or null when cancelled. */
  function askForKey(note) {
    const dlg = $("key-dialog"), input = $("key-input");
    $("key-note").textContent = note || "Kept for this tab only (sessionStorage).";
    input.value = "";
    return new Promise((resolve) => {
      const done = (key) => {
        $("key-form").onsubmit = null;
        $("key-cancel").onclick = null;
        dlg.onclose = null;
        if (dlg.open) dlg.close();
        if (key) {
          sessionStorage.setItem(API_KEY, key);
          $("api-key").value = key;
        }
        resolve(key || null);
      };
      $("key-form").onsubmit = (e) => {
        e.preventDefault();
        done(input.value.trim());
      };
      $("key-cancel").onclick = () => done(null);
      dlg.onclose = () => done(null);
      dlg.showModal();
      input.focus();
    });
  }

  // ---- Settings ---------------------------------------------------------------------------------
  const fields = ["system", "temperature", "top_p", "max_tokens"];
  for (const f of fields) {
    $(f).value = settings[f];
    $(f).addEventListener("input", () => {
      settings[f] = $(f).value;
      localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
    });
  }
  $("api-key").value = sessionStorage.getItem(API_KEY) ?? "";
  $("api-key").addEventListener("input", () => {
    const k = $("api-key").value.trim();
    if (k) sessionStorage.setItem(API_KEY, k);
    else sessionStorage.removeItem(API_KEY);
  });
  $("open-settings").addEventListener("click", () => $("settings").showModal());
  $("settings-close").addEventListener("click", () => $("settings").close());

  // ---- Wiring -----------------------------------------------------------------------------------
  function autosize() {
    q.style.height = "auto";
    q.style.height = `${Math.min(q.scrollHeight + 2, 12 * 16)}px`;
  }
  q.addEventListener("input", autosize);
  q.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });
  stop.addEventListener("click", stopGeneration);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && busy) {
      e.preventDefault();
      stopGeneration();
    }
  });
  $("new-chat").addEventListener("click", () => {
    if (busy) return;
    current = null;
    saveChats();
    renderAll();
    q.focus();
  });
  $("toggle-sidebar").addEventListener("click", () => {
    const open = document.body.classList.toggle("sidebar-open");
    $("toggle-sidebar").setAttribute("aria-expanded", String(open));
  });

  renderAll();
  q.focus();
})();
