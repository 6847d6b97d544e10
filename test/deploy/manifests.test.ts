// deploy/: every path, port, flag and metric name the Dockerfile and the Kubernetes manifests
// mention must exist where it points: paths in openapi.json, flags in the CLI, metric names in a
// live server's /metrics, ports and names in the other manifests. The server is started with the
// manifest's own arguments, and the liveness probe's command is run against it as written.
import { expect } from "chai";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, existsSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { USAGE, parseRunArgs } from "../../src/cli.js";
import { readRegistry } from "../../src/models.js";
import { defaultModelPath } from "../helpers/server.js";

type Json = Record<string, any>;

const KUBE_DIR = "deploy/kubernetes";
const openapi = JSON.parse(readFileSync("openapi.json", "utf8")) as Json;
const readme = readFileSync("README.md", "utf8");
const dockerfile = readFileSync("deploy/Dockerfile", "utf8");

const objects: Json[] = readdirSync(KUBE_DIR)
  .filter((f) => f.endsWith(".yaml"))
  .flatMap((f) =>
    parseAllDocuments(readFileSync(join(KUBE_DIR, f), "utf8")).map((d) => {
      expect(d.errors, f).to.deep.equal([]);
      return d.toJS() as Json;
    }),
  )
  .filter((o) => o !== null);

function find(kind: string, name: string): Json {
  const o = objects.find((x) => x.kind === kind && x.metadata?.name === name);
  expect(o, `${kind}/${name} in ${KUBE_DIR}`).to.not.equal(undefined);
  return o!;
}

/** The value after `flag` in an argument list (undefined when absent). */
function flagValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i < 0 ? undefined : args[i + 1];
}

function flagValues(args: string[], flag: string): string[] {
  return args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));
}

function hasGet(path: string): boolean {
  return Boolean(openapi.paths[path]?.get);
}

const subset = (small: Json, big: Json) => Object.entries(small).every(([k, v]) => big[k] === v);

// The endpoint picker's flags in the release the manifest pins (v1.3.x; later releases reject
// the --*-metric flags in favour of engineConfigs in the EndpointPickerConfig).
const EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.3.1";
const EPP_FLAGS = new Set([
  "--grpc-port", "--ha-enable-leader-election", "--pool-group", "--pool-namespace", "--pool-name",
  "--endpoint-selector", "--endpoint-target-ports", "--model-server-metrics-scheme", "--model-server-metrics-path",
  "--model-server-metrics-https-insecure-skip-verify", "--refresh-metrics-interval", "--refresh-prometheus-metrics-interval",
  "--metrics-staleness-threshold", "--total-queued-requests-metric", "--total-running-requests-metric",
  "--kv-cache-usage-percentage-metric", "--lora-info-metric", "--cache-info-metric", "--v", "--zap-encoder",
  "--zap-log-level", "--tracing", "--health-checking", "--metrics-port", "--grpc-health-port", "--enable-pprof",
  "--cert-path", "--secure-serving", "--metrics-endpoint-auth", "--config-file", "--config-text",
]);

const deployment = find("Deployment", "mashbox");
const pod = deployment.spec.template;
const container = pod.spec.containers.find((c: Json) => c.name === "mashbox") as Json;
const args = container.args as string[];
const portByName = new Map<string, number>((container.ports as Json[]).map((p) => [p.name, p.containerPort]));
const resolvePort = (p: string | number) => (typeof p === "number" ? p : portByName.get(p));

const epp = find("Deployment", "mashbox-epp");
const eppContainer = epp.spec.template.spec.containers[0] as Json;
const eppArgs = eppContainer.args as string[];

describe("deploy: Kubernetes manifests and Dockerfile", function () {
  this.timeout(60000);

  describe("static", () => {
    it("the mashbox container's arguments are a valid `mashbox run`, every flag in --help", () => {
      expect(args[0]).to.equal("run");
      const cfg = parseRunArgs(args.slice(1));
      for (const flag of args.filter((a) => a.startsWith("--"))) expect(USAGE, flag).to.include(flag);
      expect(cfg.host).to.equal("0.0.0.0");
      expect(() => parseRunArgs(["--allowed-host", "http://llm.example.com"])).to.throw(/--allowed-host/);
      expect(resolvePort("http")).to.equal(cfg.port);
    });

    it("the key file and the probe key come from the Secret the README tells you to create", () => {
      const keyFile = flagValue(args, "--api-key-file")!;
      const mount = (container.volumeMounts as Json[]).find((m) => keyFile.startsWith(m.mountPath + "/"))!;
      expect(mount, "a volume mounted above --api-key-file").to.not.equal(undefined);
      const volume = (pod.spec.volumes as Json[]).find((v) => v.name === mount.name)!;
      const item = (volume.secret.items as Json[]).find((i) => `${mount.mountPath}/${i.path}` === keyFile)!;
      expect(item, "the Secret item that becomes the key file").to.not.equal(undefined);
      const probeKey = (container.env as Json[]).find((e) => e.name === "MASHBOX_API_KEY")!.valueFrom.secretKeyRef;
      expect(probeKey.name).to.equal(volume.secret.secretName);
      const create = new RegExp(`kubectl create secret generic ${volume.secret.secretName}\\b(?:[^\\n\\\\]|\\\\\\n)*`).exec(readme)?.[0] ?? "";
      expect(create, "README: kubectl create secret").to.include(`--from-file=${item.key}=`);
      expect(create).to.include(`--from-literal=${probeKey.key}=`);
    });

    it("readiness and startup probe GET paths of openapi.json on the container's port; liveness reads /v1/health with the key", () => {
      for (const probe of [container.readinessProbe, container.startupProbe]) {
        expect(hasGet(probe.httpGet.path), probe.httpGet.path).to.equal(true);
        expect(resolvePort(probe.httpGet.port)).to.equal(Number(flagValue(args, "--port")));
      }
      expect(container.readinessProbe.httpGet.path).to.equal("/health");
      const script = container.livenessProbe.exec.command.join(" ");
      const url = new URL(/http:\/\/[^"'\s]+/.exec(script)![0]);
      expect(url.pathname).to.equal("/v1/health");
      expect(hasGet(url.pathname)).to.equal(true);
      expect(Number(url.port)).to.equal(Number(flagValue(args, "--port")));
      expect(script).to.include("process.env.MASHBOX_API_KEY");
    });

    it("the Service selects the pods and targets the container's port", () => {
      const svc = find("Service", "mashbox");
      expect(subset(svc.spec.selector, pod.metadata.labels)).to.equal(true);
      expect(resolvePort(svc.spec.ports[0].targetPort)).to.equal(Number(flagValue(args, "--port")));
      expect(flagValues(args, "--allowed-host"), "clients name the Service in Host").to.include(svc.metadata.name);
    });

    it("the InferencePool (inference.networking.k8s.io/v1) selects the pods and names the endpoint picker", () => {
      const pool = find("InferencePool", "mashbox");
      expect(pool.apiVersion).to.equal("inference.networking.k8s.io/v1");
      expect(subset(pool.spec.selector.matchLabels, pod.metadata.labels)).to.equal(true);
      expect(pool.spec.targetPorts.map((p: Json) => p.number)).to.deep.equal([Number(flagValue(args, "--port"))]);
      const eppService = find("Service", pool.spec.endpointPickerRef.name);
      expect(subset(eppService.spec.selector, epp.spec.template.metadata.labels)).to.equal(true);
      const grpc = eppService.spec.ports.find((p: Json) => p.port === pool.spec.endpointPickerRef.port.number);
      expect(grpc, "EPP Service port = endpointPickerRef port").to.not.equal(undefined);
      const named = new Map<string, number>((eppContainer.ports as Json[]).map((p) => [p.name, p.containerPort]));
      expect(named.get(grpc.targetPort) ?? grpc.targetPort).to.equal(Number(flagValue(eppArgs, "--grpc-port")));
      expect(flagValue(eppArgs, "--pool-name")).to.equal(pool.metadata.name);
      const route = find("HTTPRoute", "mashbox");
      expect(route.spec.rules[0].backendRefs[0]).to.include({ group: "inference.networking.k8s.io", kind: "InferencePool", name: pool.metadata.name });
      for (const h of route.spec.hostnames) expect(flagValues(args, "--allowed-host"), `mashbox answers to ${h}`).to.include(h);
    });

    it("the endpoint picker gets only its own flags, reads mashbox's /metrics, and may watch the pods and the pool", () => {
      expect(eppContainer.image).to.equal(EPP_IMAGE);
      for (const flag of eppArgs.filter((a) => a.startsWith("--"))) expect(EPP_FLAGS.has(flag), flag).to.equal(true);
      expect(hasGet(flagValue(eppArgs, "--model-server-metrics-path")!)).to.equal(true);
      const configFile = flagValue(eppArgs, "--config-file")!;
      const mount = (eppContainer.volumeMounts as Json[]).find((m) => configFile.startsWith(m.mountPath + "/"))!;
      const volume = (epp.spec.template.spec.volumes as Json[]).find((v) => v.name === mount.name)!;
      const config = find("ConfigMap", volume.configMap.name).data[configFile.slice(mount.mountPath.length + 1)];
      const pluginConfig = parseAllDocuments(config)[0].toJS() as Json;
      expect(pluginConfig.kind).to.equal("EndpointPickerConfig");
      const role = find("Role", find("RoleBinding", epp.spec.template.spec.serviceAccountName).roleRef.name);
      const may = (group: string, resource: string) => role.rules.some((r: Json) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes("watch"));
      expect(may("", "pods")).to.equal(true);
      expect(may("inference.networking.k8s.io", "inferencepools")).to.equal(true);
    });

    it("the Dockerfile runs the README's setup commands and serves what the manifests expect", () => {
      const runs = dockerfile.split("\n").filter((l) => l.startsWith("RUN "));
      for (const cmd of ["npm ci", "npm run build", "node bin/mashbox.js pull"]) {
        expect(runs.some((r) => r.includes(cmd)), `RUN ${cmd}`).to.equal(true);
        expect(readme.includes(cmd.replace("node bin/mashbox.js", "mashbox")) || readme.includes(cmd), `README: ${cmd}`).to.equal(true);
      }
      expect(/^EXPOSE (\d+)$/m.exec(dockerfile)?.[1]).to.equal(flagValue(args, "--port"));
      const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]) as string[];
      expect(cmd[0]).to.equal("run");
      // The image bakes in the registry's default model, and both the image and the manifest serve it.
      const baked = /^ARG MODEL=(\S+)$/m.exec(dockerfile)?.[1];
      expect(baked).to.equal(readRegistry().default);
      expect(cmd[1], "the image's CMD serves the baked model").to.equal(baked);
      expect(args[1], "the manifest serves the baked model").to.equal(baked);
      expect(parseRunArgs(cmd.slice(1)).port).to.equal(Number(flagValue(args, "--port")));
      expect(flagValue(cmd, "--api-key-file")).to.equal(flagValue(args, "--api-key-file"));
      // The runtime stage copies the build's outputs where the CLI looks for them.
      const copies = [...dockerfile.matchAll(/^COPY --from=build (?:--chown=\S+ )?(.+) (\S+)$/gm)].flatMap((m) => m[1].split(" "));
      for (const src of copies.filter((s) => s.startsWith("/src/"))) {
        const rel = src.slice("/src/".length);
        const built = ["dist", "node_modules", "native/build/binding/mashbox_native.node"].includes(rel);
        expect(built || existsSync(rel), `${rel} exists or is built by npm ci / npm run build`).to.equal(true);
      }
      expect(readFileSync("src/engine/native.ts", "utf8")).to.include("native/build/binding/mashbox_native.node");
      expect(/^ENTRYPOINT \["node", "bin\/mashbox\.js"\]$/m.test(dockerfile)).to.equal(true);
    });
  });

  describe("live: the server started with the manifest's arguments", () => {
    let child: ChildProcess;
    let port = 0;
    let log = "";
    const probeKey = "sk-probe-test";
    const clientKey = "sk-client-test";

    before(async function () {
      const dir = mkdtempSync(join(tmpdir(), "mashbox-deploy-"));
      const keyFile = join(dir, "keys");
      writeFileSync(keyFile, `${clientKey} team\n`);
      // The manifest's arguments, but on loopback, any port and a fixture model: the dev box is shared.
      const run = args.slice(2).slice();
      const set = (flag: string, value: string) => (run[run.indexOf(flag) + 1] = value);
      set("--host", "127.0.0.1");
      set("--port", "0");
      set("--api-key-file", keyFile);
      set("--threads", "1");
      set("--ctx", "256");
      child = spawn(process.execPath, ["bin/mashbox.js", "run", defaultModelPath(), ...run], {
        stdio: ["ignore", "ignore", "pipe"],
        env: { ...process.env, MASHBOX_API_KEY: probeKey },
      });
      child.stderr!.setEncoding("utf8").on("data", (d: string) => (log += d));
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`not ready: ${log}`)), 45000);
        const poll = setInterval(() => {
          const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
          if (m && /ready —/.test(log)) {
            port = Number(m[1]);
            clearTimeout(t);
            clearInterval(poll);
            resolve();
          } else if (child.exitCode !== null) {
            clearTimeout(t);
            clearInterval(poll);
            reject(new Error(`server exited: ${log}`));
          }
        }, 100);
      });
    });

    after(async () => {
      if (child && child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await exited;
      }
    });

    /** GET with an explicit Host header (fetch cannot set one). */
    function get(path: string, host: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
      return new Promise((resolve, reject) => {
        const req = request({ host: "127.0.0.1", port, path, headers: { host, ...headers } }, (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (d: string) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode!, body }));
        });
        req.on("error", reject);
        req.end();
      });
    }

    it("answers the readiness path, and the liveness command exits 0 with the probe key and 1 without it", () => {
      return (async () => {
        expect((await get(container.readinessProbe.httpGet.path, `127.0.0.1:${port}`)).status).to.equal(200);
        const [exe, ...rest] = container.livenessProbe.exec.command as string[];
        expect(exe).to.equal("node");
        const command = rest.map((a) => a.replace("127.0.0.1:8000", `127.0.0.1:${port}`));
        const ok = spawnSync(process.execPath, command, { env: { ...process.env, MASHBOX_API_KEY: probeKey }, timeout: 20000 });
        expect(ok.status, String(ok.stderr)).to.equal(0);
        const wrong = spawnSync(process.execPath, command, { env: { ...process.env, MASHBOX_API_KEY: "sk-wrong" }, timeout: 20000 });
        expect(wrong.status).to.equal(1);
      })();
    });

    it("answers the Service's and the gateway's names in Host, still wants a key on /v1, refuses other names", async () => {
      for (const name of flagValues(args, "--allowed-host")) {
        expect((await get("/health", `${name}:8000`)).status, name).to.equal(200);
        expect((await get("/health", name)).status, name).to.equal(200);
      }
      expect((await get("/v1/models", `mashbox:8000`)).status).to.equal(401);
      expect((await get("/v1/models", `mashbox:8000`, { authorization: `Bearer ${clientKey}` })).status).to.equal(200);
      expect((await get("/health", "rebind.attacker.example:8000")).status).to.equal(403);
    });

    it("/metrics answers without a key and carries every mashbox: metric the endpoint picker is told to read, as gauges", async () => {
      const m = await get(flagValue(eppArgs, "--model-server-metrics-path")!, `127.0.0.1:${port}`);
      expect(m.status).to.equal(200);
      const named = eppArgs.filter((a) => a.startsWith("mashbox:"));
      expect(named.length).to.equal(3);
      for (const flag of ["--total-queued-requests-metric", "--total-running-requests-metric", "--kv-cache-usage-percentage-metric"]) {
        const metric = flagValue(eppArgs, flag)!;
        expect(m.body, `${flag} ${metric}`).to.match(new RegExp(`^# TYPE ${metric} gauge$`, "m"));
        const value = Number(new RegExp(`^${metric} (\\S+)$`, "m").exec(m.body)?.[1]);
        expect(value, metric).to.be.within(0, metric.includes("kv_cache") ? 1 : 1e9);
      }
      // Every other mashbox: name the manifests mention exists too.
      const mentioned = objects.flatMap((o) => JSON.stringify(o).match(/mashbox:[a-z_]+/g) ?? []);
      for (const name of new Set(mentioned)) expect(m.body, name).to.match(new RegExp(`^# TYPE ${name} `, "m"));
    });
  });
});
