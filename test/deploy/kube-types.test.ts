// deploy/kubernetes decoded by Kubernetes' own Go types, unknown fields refused: k8s.io/api
// (apps/v1, core/v1, rbac/v1), Gateway API v1 (HTTPRoute), and InferencePool (a mirror of the
// upstream type: test/deploy/k8s/inferencepool.go says why). The Go program is built once per
// hash of its sources and the module versions, in $MASHBOX_HOME/k8scheck (default
// ~/.cache/mashbox/k8scheck); modules come from the Go module proxy.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";

const SRC = "test/deploy/k8s";
const KUBE_DIR = "deploy/kubernetes";
const MODULES = ["k8s.io/api v0.37.2", "k8s.io/apimachinery v0.37.2", "sigs.k8s.io/gateway-api v1.6.3", "sigs.k8s.io/yaml v1.6.0"];
const CACHE = join(process.env.MASHBOX_HOME ?? join(homedir(), ".cache", "mashbox"), "k8scheck");

function build(): string {
  const sources = readdirSync(SRC).filter((f) => f.endsWith(".go")).sort();
  const h = createHash("sha256");
  for (const f of sources) h.update(readFileSync(join(SRC, f)));
  h.update(MODULES.join("\n"));
  h.update(spawnSync("go", ["version"], { encoding: "utf8" }).stdout ?? "");
  const dir = join(CACHE, h.digest("hex").slice(0, 16));
  const binary = join(dir, "k8scheck");
  if (existsSync(binary)) return binary;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  for (const f of sources) copyFileSync(join(SRC, f), join(tmp, f));
  writeFileSync(join(tmp, "go.mod"), `module mashbox.local/k8scheck\n\ngo 1.23\n\nrequire (\n${MODULES.map((m) => `\t${m}\n`).join("")})\n`);
  const env = { ...process.env, GOFLAGS: "-mod=mod" };
  for (const args of [["mod", "tidy"], ["build", "-o", "k8scheck", "."]]) {
    const r = spawnSync("go", args, { cwd: tmp, env, encoding: "utf8" });
    expect(r.status, `go ${args.join(" ")}: ${r.stdout}${r.stderr}`).to.equal(0);
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return binary;
}

function run(binary: string, files: string[]) {
  const r = spawnSync(binary, files, { encoding: "utf8" });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("deploy: manifests decode strictly into the Kubernetes Go types", function () {
  this.timeout(15 * 60_000); // a cold build fetches and compiles k8s.io/api
  let binary = "";
  const files = readdirSync(KUBE_DIR).filter((f) => f.endsWith(".yaml")).map((f) => join(KUBE_DIR, f));

  before(() => {
    binary = build();
  });

  it("decodes every document of deploy/kubernetes", () => {
    const r = run(binary, files);
    expect(r.status, r.out).to.equal(0);
    // Deployment + Service (mashbox.yaml); InferencePool, ServiceAccount, Role, RoleBinding,
    // ClusterRole, ClusterRoleBinding, ConfigMap, Deployment, Service, HTTPRoute (inferencepool.yaml).
    expect(r.out.match(/^ok /gm) ?? [], r.out).to.have.length(12);
  });

  it("refuses a field the type does not have, and a kind it does not know", () => {
    const dir = mkdtempSync(join(tmpdir(), "mashbox-k8s-"));
    const pool = readFileSync(join(KUBE_DIR, "inferencepool.yaml"), "utf8");
    const cases: [string, string, RegExp][] = [
      ["deployment", readFileSync(join(KUBE_DIR, "mashbox.yaml"), "utf8").replace(/^spec:$/m, "spec:\n  replica: 2"), /unknown field "replica"/],
      ["pool", pool.replace("  targetPorts:", "  targetPort: 8000\n  targetPorts:"), /unknown field "targetPort"/],
      ["kind", "apiVersion: v1\nkind: Pod2\nmetadata:\n  name: x\n", /no Go type known/],
    ];
    for (const [name, text, why] of cases) {
      const file = join(dir, `${name}.yaml`);
      writeFileSync(file, text);
      const r = run(binary, [file]);
      expect(r.status, `${name}: ${r.out}`).to.equal(1);
      expect(r.out, name).to.match(why);
    }
  });
});
