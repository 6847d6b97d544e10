// Servers the benchmarks start: a free port, and a child process that is ready once its /health
// answers 200 (mashbox and llama-server both serve it), its output in a log file.
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}
/** start(name, cmd, argv, port) with logs under logDir; live holds the running children. */
export function serverStarter(logDir, live) {
  return async function startServer(name, cmd, argv, port) {
    const log = join(logDir, `${name}-${port}.log`);
    const out = createWriteStream(log);
    const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
    live.add(child);
    child.stdout.pipe(out);
    child.stderr.pipe(out);
    let exited = null;
    child.once("exit", (code, sig) => {
      exited = code ?? sig;
      live.delete(child);
    });
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 600_000;
    for (;;) {
      if (exited !== null) throw new Error(`${name} exited ${exited} before it was ready (log: ${log})`);
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        throw new Error(`${name} not ready after 600 s (log: ${log})`);
      }
      try {
        const r = await fetch(`${base}/health`);
        if (r.status === 200) break;
      } catch {
        // not listening yet
      }
      await sleep(250);
    }
    return {
      base,
      stop: () =>
        new Promise((res) => {
          if (exited !== null) return res();
          child.once("exit", () => res());
          child.kill("SIGTERM");
          setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
        }),
    };
  };
}
