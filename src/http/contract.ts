// Test mode (validate_responses): every answer the server sends is checked against
// openapi.json as it leaves. Violations are recorded (the test harness fails the test that
// caused them) and logged, so a contract break is loud even outside a harness.
import { Transform, type TransformCallback } from "node:stream";
import type { ResponseValidator } from "../contract/validator.js";

export class ContractRecorder {
  readonly violations: string[] = [];
  constructor(
    readonly validator: ResponseValidator,
    private readonly log: (line: string) => void,
  ) {}

  record(where: string, errors: string[]): void {
    for (const e of errors) {
      const line = `${where}: ${e}`;
      this.violations.push(line);
      this.log(`CONTRACT VIOLATION ${line}`);
    }
  }

  /** Passes an SSE byte stream through unchanged, validating each complete event. */
  sseTap(operationId: string, where: string): Transform {
    let buf = "";
    const decoder = new TextDecoder();
    const check = (block: string) => {
      let event: string | undefined;
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length === 0 && event === undefined) return; // comment / keep-alive
      this.record(where, this.validator.validateSseEvent(operationId, data.join("\n"), event));
    };
    return new Transform({
      transform(chunk: Buffer | string, _enc, cb: TransformCallback) {
        buf += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          check(buf.slice(0, i));
          buf = buf.slice(i + 2);
        }
        cb(null, chunk);
      },
      flush: (cb: TransformCallback) => {
        if (buf.trim() !== "") this.record(where, [`stream ended inside an event: ${JSON.stringify(buf.slice(0, 80))}`]);
        cb();
      },
    });
  }
}
