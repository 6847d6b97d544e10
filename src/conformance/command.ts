// The `mashbox conformance` command line: arguments → runConformance → one stdout line per failed
// check, then "N passed, N failed". Exit 0 when nothing failed, 1 when something did, 2 when the
// run could not start (bad arguments, schemathesis missing).
import { parseArgs } from "node:util";
import { ConformanceSetupError, PHASES, runConformance, type ConformanceOptions } from "./conformance.js";

/** The command's line in mashbox --help. */
export const CONFORMANCE_COMMAND = `  mashbox conformance BASE_URL [options]
                                  Check a running server (this one, a deployment, a mock)
                                  against openapi.json; one line per failure, then a count`;

/** Its options section in mashbox --help. */
export const CONFORMANCE_OPTIONS = `conformance options:
  --api-key KEY        Sent as Authorization: Bearer KEY; also checks that a request without
                       it is refused with 401.
  --examples N         Generated cases per operation and phase (default 10).
  --seed N             Hypothesis seed (default 1; fixed so that a failure reproduces).
  --phases LIST        schemathesis phases, comma-separated (default examples,coverage,fuzzing;
                       examples alone is a quick smoke check).
  --operation ID       Only this operation id (repeatable; default all).
  --spec FILE          The contract to check against (default: this package's openapi.json).
  --report-dir DIR     Keep schemathesis's output and junit report here (default: a temp folder).
  --timeout S          Stop schemathesis after S seconds and fail (default 900).
  --request-timeout S  Per-request timeout in seconds (default 120).
  Needs schemathesis 4 on PATH as \`st\` (pip install -r requirements-ci.txt).
`;

function wholeNumber(name: string, v: string | undefined, def: number, min: number): number {
  if (v === undefined) return def;
  if (!/^\d+$/.test(v) || Number(v) < min) throw new ConformanceSetupError(`--${name} must be a whole number >= ${min}, got '${v}'`);
  return Number(v);
}

export function parseConformanceArgs(args: string[]): ConformanceOptions {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      "api-key": { type: "string" },
      examples: { type: "string" },
      seed: { type: "string" },
      phases: { type: "string" },
      operation: { type: "string", multiple: true },
      spec: { type: "string" },
      "report-dir": { type: "string" },
      timeout: { type: "string" },
      "request-timeout": { type: "string" },
    },
  });
  const phases = values.phases?.split(",").map((p) => p.trim());
  for (const p of phases ?? []) if (!(PHASES as readonly string[]).includes(p)) throw new ConformanceSetupError(`--phases takes ${PHASES.join(", ")}; got '${p}'`);
  if (positionals.length !== 1) throw new ConformanceSetupError(`conformance takes one BASE_URL (e.g. http://127.0.0.1:8000), got ${positionals.length}`);
  return {
    base_url: positionals[0],
    api_key: values["api-key"],
    max_examples: wholeNumber("examples", values.examples, 10, 1),
    seed: wholeNumber("seed", values.seed, 1, 0),
    phases,
    operations: values.operation,
    spec_path: values.spec,
    report_dir: values["report-dir"],
    timeout_s: wholeNumber("timeout", values.timeout, 900, 1),
    request_timeout_s: wholeNumber("request-timeout", values["request-timeout"], 120, 1),
  };
}

export async function cmdConformance(args: string[], out: (s: string) => void, err: (s: string) => void): Promise<number> {
  let opts: ConformanceOptions;
  try {
    opts = parseConformanceArgs(args);
  } catch (e) {
    err(`mashbox: ${(e as Error).message}\nRun mashbox --help for the options.\n`);
    return 2;
  }
  try {
    const r = await runConformance({ ...opts, progress: (l) => err(l + "\n") });
    for (const f of r.failures) out(f + "\n");
    out(`${r.passed} passed, ${r.failures.length} failed\n`);
    return r.failures.length === 0 ? 0 : 1;
  } catch (e) {
    err(`mashbox: ${(e as Error).message}\n`);
    return e instanceof ConformanceSetupError ? 2 : 1;
  }
}
