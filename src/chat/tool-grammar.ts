// Forced tool choice as a decoding grammar. tool_choice "required" (OpenAI) / "any" (Anthropic) /
// a named tool must yield a well-formed call whose arguments conform to the tool's JSON Schema;
// asking in the prompt is not enough for a small model, so the sampler is constrained to
//
//   <tool_call>\n{"name": "<allowed name>", "arguments": <object per that tool's schema>}\n</tool_call>
//
// (the Hermes block src/chat/parsers/hermes.ts reads back, so the call flows through every dialect
// unchanged) followed by end of generation. The grammar syntax is native/engine/grammar.h's.
//
// JSON layout is fixed, the way json.dumps writes it (", " and ": ", no other whitespace), so a
// model cannot wander into endless whitespace. Numbers are bounded in length for the same reason.
// Supported: type (incl. type arrays, nullable), object properties/required (required ones
// always, optional ones optionally, declared order; no extra keys unless the object declares no
// properties), additionalProperties as a value schema, string (minLength/maxLength, enum, const,
// escapes, well-formed UTF-8), number, integer (minimum >= 0 / >= 1, small closed ranges spelt
// out), boolean, null, array (items, prefixItems, minItems/maxItems), enum/const of any JSON
// value, anyOf/oneOf, allOf (merged), $ref into the same schema (#, #/$defs/…, #/definitions/…,
// recursive refs included). Anything else falls back to "any JSON value". Not enforced: pattern,
// format, number bounds, multipleOf, uniqueItems, min/maxProperties, not, if/then/else,
// oneOf's exclusivity; string and array bounds above LENGTH_CAP count as unbounded.
//
// A schema is caller input, so building is bounded: at most MAX_VISITS schema nodes visited
// (anyOf with sibling keywords and allOf copy subtrees, so a small schema can expand
// exponentially), MAX_DEPTH levels of nesting, MAX_GRAMMAR_BYTES of grammar text. A $ref that
// reaches itself before any byte is written ({"$ref": "#"}) describes no finite JSON text and
// is refused as well; the native grammar compiler would reject it as left-recursive. So is a
// schema any part of which can never end (a.b requires b, b.a requires a; a non-empty array of
// itself): the grammar would still accept every prefix, and a forced call would write until
// max_tokens. Every refusal is a ToolSchemaError naming the tool. The engine runs this off the HTTP thread
// (src/engine/grammar-pool.ts) with a time limit on top.
import type { ChatPrompt, ToolSpec } from "./types.js";
import { CALL_OPENINGS, OPENING_GAP, type ToolFamily } from "./tool-forms.js";

type Schema = Record<string, unknown>;

/** Longer length/item bounds are not spelt out (each unit of a bound costs a grammar rule). */
const LENGTH_CAP = 4096;
/** Closed integer ranges up to this many values become an enumeration. */
const INT_ENUM_CAP = 256;
/** Schema nodes visited per tool: past this the schema is "too complex". */
const MAX_VISITS = 20_000;
/** Nesting of schema inside schema (properties, items, anyOf, $ref ...). */
const MAX_DEPTH = 64;
/** Grammar text of one forced call, far below the native compiler's element limit. */
export const MAX_GRAMMAR_BYTES = 1 << 20;

/** A tool whose schema cannot be turned into a grammar, and why (a 400 for the request). */
export class ToolSchemaError extends Error {
  constructor(
    readonly tool: string,
    readonly reason: string,
  ) {
    super(`tool '${tool}': its parameters schema cannot constrain a forced call: ${reason}`);
  }
}

/** A schema past one of the builder's bounds (wrapped into a ToolSchemaError by the caller). */
class SchemaLimit extends Error {}

const isObj = (v: unknown): v is Schema => v !== null && typeof v === "object" && !Array.isArray(v);
const nonNegInt = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined;

/** A grammar string literal standing for the UTF-8 bytes of `s`. */
export function gbnfLiteral(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else out += ch; // UTF-8 bytes pass through a literal as they are
  }
  return out + '"';
}

/** The JSON text of a value in the grammar's layout (", " and ": ", or "," and ":" compact). */
function jsonText(v: unknown, compact = false): string {
  const [comma, colon] = compact ? [",", ":"] : [", ", ": "];
  if (Array.isArray(v)) return `[${v.map((x) => jsonText(x, compact)).join(comma)}]`;
  if (isObj(v)) return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}${colon}${jsonText(x, compact)}`).join(comma)}}`;
  return JSON.stringify(v) ?? "null";
}

// Shared JSON building blocks (names start with "json-"; schema rules never do).
const PRIMITIVES: Record<string, { body: string; deps: string[] }> = {
  "json-value": { body: 'json-object | json-array | json-string | json-number | "true" | "false" | "null"', deps: ["json-object", "json-array", "json-string", "json-number"] },
  "json-object": { body: String.raw`"{" ( json-string ": " json-value ( ", " json-string ": " json-value )* )? "}"`, deps: ["json-string", "json-value"] },
  "json-array": { body: String.raw`"[" ( json-value ( ", " json-value )* )? "]"`, deps: ["json-value"] },
  "json-string": { body: String.raw`"\"" json-char* "\""`, deps: ["json-char"] },
  // One JSON string character: printable ASCII but " and \, an escape, or one well-formed UTF-8
  // sequence (so what reaches the client never needs U+FFFD repairs).
  "json-char": { body: String.raw`[\x20-\x21\x23-\x5b\x5d-\x7f] | json-utf8 | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )`, deps: ["json-utf8"] },
  "json-utf8": {
    body: String.raw`[\xc2-\xdf] [\x80-\xbf] | "\xe0" [\xa0-\xbf] [\x80-\xbf] | [\xe1-\xec\xee-\xef] [\x80-\xbf]{2} | "\xed" [\x80-\x9f] [\x80-\xbf] | "\xf0" [\x90-\xbf] [\x80-\xbf]{2} | [\xf1-\xf3] [\x80-\xbf]{3} | "\xf4" [\x80-\x8f] [\x80-\xbf]{2}`,
    deps: [],
  },
  // At most 16 integer digits, 15 fraction digits, a 2-digit exponent: finite doubles only.
  "json-number": { body: String.raw`"-"? json-nat ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?`, deps: ["json-nat"] },
  "json-nat": { body: String.raw`"0" | [1-9] [0-9]{0,15}`, deps: [] },
  "json-pos": { body: String.raw`[1-9] [0-9]{0,15}`, deps: [] },
  "json-integer": { body: String.raw`"-"? json-nat`, deps: ["json-nat"] },
  "json-boolean": { body: '"true" | "false"', deps: [] },
  "json-null": { body: '"null"', deps: [] },
};

class GrammarBuilder {
  private rules = new Map<string, string>(); // name -> body, in creation order
  private byBody = new Map<string, string>();
  private refs = new Map<string, string>();
  private suffix = new Map<string, number>();
  private root: unknown = {};
  private visits = 0;
  private depth = 0;
  private bytes = 0;
  /** Bytes-written depth: objects and arrays add one around their members. */
  private consumed = 0;
  /** $refs being expanded, with the `consumed` depth each started at. */
  private expanding = new Map<string, number>();
  /** ": " or ":" after a key, as text. */
  get separator(): string {
    return this.colon;
  }
  /** The separators as grammar literals, and the colon as text. */
  private readonly comma: string;
  private readonly colon: string;

  /** compact: JSON without spaces ("," and ":"), the way gpt-oss writes its arguments. */
  constructor(private readonly compact = false) {
    this.comma = compact ? '","' : '", "';
    this.colon = compact ? ":" : ": ";
  }

  /** The rule for a primitive, added with what it uses. */
  prim(name: string): string {
    if (!this.rules.has(name)) {
      const p = PRIMITIVES[name];
      this.rules.set(name, this.compact ? p.body.replaceAll('", "', '","').replaceAll('": "', '":"') : p.body);
      for (const d of p.deps) this.prim(d);
    }
    return name;
  }

  /** A named rule for `body`; identical bodies share one rule. */
  add(hint: string, body: string): string {
    const known = this.byBody.get(body);
    if (known) return known;
    const name = this.fresh(hint);
    this.setRule(name, body);
    this.byBody.set(body, name);
    return name;
  }

  private setRule(name: string, body: string): void {
    this.bytes += name.length + body.length + 6;
    if (this.bytes > MAX_GRAMMAR_BYTES) throw new SchemaLimit(`the grammar would exceed ${MAX_GRAMMAR_BYTES} bytes`);
    this.rules.set(name, body);
  }

  /** Visits members of an object or array: they come after its opening byte. */
  private member(schema: unknown, hint: string): string {
    this.consumed++;
    try {
      return this.visit(schema, hint);
    } finally {
      this.consumed--;
    }
  }

  private fresh(hint: string): string {
    let base = hint.replace(/[^A-Za-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 48) || "r";
    if (base.startsWith("json-") || base === "root") base = `s-${base}`;
    if (!this.rules.has(base)) return base;
    // Suffixes below the remembered one are all taken (rules are never removed): a schema with
    // thousands of properties would otherwise rescan them for every new rule.
    let i = this.suffix.get(base) ?? 2;
    while (this.rules.has(`${base}-${i}`)) i++;
    this.suffix.set(base, i + 1);
    return `${base}-${i}`;
  }

  /** Grammar expression for a whole schema ($refs resolve inside it). */
  schema(schema: unknown, hint: string): string {
    this.root = schema;
    this.refs = new Map();
    this.expanding = new Map();
    this.visits = 0;
    return this.visit(schema, hint);
  }

  /**
   * For each expression, a rule it can reach that derives no finite text, or null. Such a rule
   * (a.b requires b, b.a requires a) still matches every prefix, so a sampler that enters it
   * writes until max_tokens; the call must be refused instead.
   */
  endless(exprs: string[]): (string | null)[] {
    const g = new Derivations();
    const roots = exprs.map((e) => g.parse(e));
    const bodies = new Map<string, number>();
    for (const [name, body] of this.rules) bodies.set(name, g.parse(body));
    const finite = g.finite(bodies);
    // Named by the $ref that loops when there is one: that is the name the client wrote.
    const refRules = new Set(this.refs.values());
    return roots.map((root) => {
      const stuck = g.unending(root, bodies, finite);
      return stuck.find((r) => refRules.has(r)) ?? stuck[0] ?? null;
    });
  }

  /** The $ref a rule was made for, if any (to name it in a refusal). */
  refOf(rule: string): string | undefined {
    for (const [ref, name] of this.refs) if (name === rule) return ref;
    return undefined;
  }

  text(rootBody: string): string {
    const lines = [`root ::= ${rootBody}`];
    for (const [name, body] of this.rules) lines.push(`${name} ::= ${body}`);
    return lines.join("\n") + "\n";
  }

  private alternatives(hint: string, alts: string[]): string {
    const unique = [...new Set(alts)];
    return unique.length === 1 ? unique[0] : this.add(hint, unique.join(" | "));
  }

  private ref(ref: string, hint: string): string {
    const open = this.expanding.get(ref);
    if (open !== undefined && open === this.consumed) throw new SchemaLimit(`'${ref.slice(0, 100)}' refers to itself before any value is written (a recursive schema with no base case)`);
    const known = this.refs.get(ref);
    if (known) return known;
    const target = resolvePointer(this.root, ref);
    if (target === undefined) return this.prim("json-value");
    const name = this.fresh(ref.split("/").pop() || hint);
    this.refs.set(ref, name);
    this.rules.set(name, "\"\""); // reserved now so that recursive refs find it
    this.expanding.set(ref, this.consumed);
    try {
      this.setRule(name, this.visit(target, name));
    } finally {
      this.expanding.delete(ref);
    }
    return name;
  }

  private visit(schema: unknown, hint: string): string {
    if (++this.visits > MAX_VISITS) throw new SchemaLimit(`too complex (over ${MAX_VISITS} schema nodes once $ref, anyOf and allOf are expanded)`);
    if (this.depth >= MAX_DEPTH) throw new SchemaLimit(`nested more than ${MAX_DEPTH} levels deep`);
    this.depth++;
    try {
      return this.visitNode(schema, hint);
    } finally {
      this.depth--;
    }
  }

  private visitNode(schema: unknown, hint: string): string {
    if (!isObj(schema)) return this.prim("json-value"); // true, {} placeholders, garbage
    const s = schema;
    if (typeof s.$ref === "string") return this.ref(s.$ref, hint);
    if ("const" in s) return gbnfLiteral(jsonText(s.const, this.compact));
    if (Array.isArray(s.enum) && s.enum.length > 0) return this.alternatives(hint, s.enum.map((v) => gbnfLiteral(jsonText(v, this.compact))));
    const union = Array.isArray(s.anyOf) ? s.anyOf : Array.isArray(s.oneOf) ? s.oneOf : null;
    if (union && union.length > 0) {
      const { anyOf: _a, oneOf: _o, ...rest } = s;
      // Sibling keywords apply to every branch.
      return this.alternatives(hint, union.map((sub, i) => this.visit(isObj(sub) ? { ...rest, ...sub } : sub, `${hint}-${i}`)));
    }
    if (Array.isArray(s.allOf) && s.allOf.length > 0) {
      const { allOf, ...rest } = s;
      return this.visit(this.merge([rest, ...(allOf as unknown[])]), hint);
    }
    if (Array.isArray(s.type)) {
      const types = s.type.filter((t): t is string => typeof t === "string");
      if (types.length === 0) return this.prim("json-value");
      return this.alternatives(hint, types.map((t) => this.visit({ ...s, type: t }, `${hint}-${t}`)));
    }
    if (s.nullable === true) {
      const { nullable: _n, ...rest } = s;
      return this.alternatives(hint, [this.visit(rest, hint), this.prim("json-null")]);
    }
    const type =
      typeof s.type === "string"
        ? s.type
        : "properties" in s || "additionalProperties" in s || "required" in s
          ? "object"
          : "items" in s || "prefixItems" in s
            ? "array"
            : null;
    switch (type) {
      case "string":
        return this.string(s, hint);
      case "number":
        return this.prim("json-number");
      case "integer":
        return this.integer(s, hint);
      case "boolean":
        return this.prim("json-boolean");
      case "null":
        return this.prim("json-null");
      case "object":
        return this.object(s, hint);
      case "array":
        return this.array(s, hint);
      default:
        return this.prim("json-value");
    }
  }

  /** allOf: one schema with the properties and required lists of all (refs resolved). */
  private merge(parts: unknown[]): Schema {
    const out: Schema = {};
    const props: Schema = {};
    const required: string[] = [];
    for (let p of parts) {
      for (let hops = 0; isObj(p) && typeof p.$ref === "string" && hops < 16; hops++) p = resolvePointer(this.root, p.$ref);
      if (!isObj(p)) continue;
      Object.assign(out, p);
      if (isObj(p.properties)) Object.assign(props, p.properties);
      if (Array.isArray(p.required)) required.push(...p.required.filter((k): k is string => typeof k === "string"));
    }
    delete out.$ref;
    if (Object.keys(props).length > 0) out.properties = props;
    if (required.length > 0) out.required = [...new Set(required)];
    return out;
  }

  private string(s: Schema, hint: string): string {
    const min = Math.min(nonNegInt(s.minLength) ?? 0, LENGTH_CAP);
    let max = nonNegInt(s.maxLength);
    if (max !== undefined && max > LENGTH_CAP) max = undefined;
    if (min === 0 && max === undefined) return this.prim("json-string");
    this.prim("json-char");
    const rep = max === undefined ? `{${min},}` : `{${min},${Math.max(min, max)}}`;
    return this.add(hint, `"\\"" json-char${rep} "\\""`);
  }

  private integer(s: Schema, hint: string): string {
    const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
    let lo = num(s.minimum);
    const xlo = num(s.exclusiveMinimum);
    if (xlo !== undefined) lo = lo === undefined ? Math.floor(xlo) + 1 : Math.max(lo, Math.floor(xlo) + 1);
    let hi = num(s.maximum);
    const xhi = num(s.exclusiveMaximum);
    if (xhi !== undefined) hi = hi === undefined ? Math.ceil(xhi) - 1 : Math.min(hi, Math.ceil(xhi) - 1);
    if (lo !== undefined) lo = Math.ceil(lo);
    if (hi !== undefined) hi = Math.floor(hi);
    if (lo !== undefined && hi !== undefined && hi >= lo && hi - lo < INT_ENUM_CAP) {
      const values: string[] = [];
      for (let v = lo; v <= hi; v++) values.push(gbnfLiteral(String(v)));
      return this.alternatives(hint, values);
    }
    if (lo !== undefined && lo >= 1) return this.prim("json-pos");
    if (lo !== undefined && lo >= 0) return this.prim("json-nat");
    return this.prim("json-integer");
  }

  private object(s: Schema, hint: string): string {
    const props = isObj(s.properties) ? Object.entries(s.properties) : [];
    const required = new Set(Array.isArray(s.required) ? s.required.filter((k): k is string => typeof k === "string") : []);
    for (const k of required) if (!props.some(([p]) => p === k)) props.push([k, true]);
    if (props.length === 0) {
      const ap = s.additionalProperties;
      if (isObj(ap) && Object.keys(ap).length > 0) {
        const v = this.member(ap, `${hint}-value`);
        const kv = `json-string ${gbnfLiteral(this.colon)} ${v}`;
        this.prim("json-string");
        return this.add(hint, `"{" ( ${kv} ( ${this.comma} ${kv} )* )? "}"`);
      }
      // No declared properties: free-form unless extra keys are forbidden (or it is the
      // explicit empty `properties: {}` a tool without parameters sends).
      if (ap === false || (isObj(s.properties) && ap === undefined)) return '"{}"';
      return this.prim("json-object");
    }
    const items = props.map(([k, v]) => ({
      kv: `${gbnfLiteral(JSON.stringify(k) + this.colon)} ${this.member(v, `${hint}-${k}`)}`,
      req: required.has(k),
    }));
    const n = items.length;
    // tail[i]: items i.. when something came before (each with its ", "), a chain of rules;
    // first[i]: items i.. when nothing came before (the first one present has no comma).
    // Built from the last item back, without recursion: an object may have thousands.
    const tail: string[] = new Array(n + 1).fill("");
    for (let i = n - 1; i >= 0; i--) {
      const it = items[i];
      const body = `${it.req ? `${this.comma} ${it.kv}` : `( ${this.comma} ${it.kv} )?`} ${tail[i + 1]}`.trim();
      tail[i] = i + 1 < n ? this.add(`${hint}-tail`, body) : body;
    }
    // Named rules both ways, so many optional properties never nest deeply.
    const first: string[] = new Array(n + 1).fill("");
    for (let i = n - 1; i >= 0; i--) {
      const it = items[i];
      const withThis = `${it.kv} ${tail[i + 1]}`.trim();
      first[i] = it.req ? withThis : this.add(`${hint}-first`, first[i + 1] === "" ? `( ${withThis} )?` : `${withThis} | ${first[i + 1]}`);
    }
    return this.add(hint, `"{" ${first[0]} "}"`);
  }

  private array(s: Schema, hint: string): string {
    const tuple = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : null;
    if (tuple) {
      if (tuple.length === 0) return '"[]"';
      const parts = tuple.map((t, i) => this.member(t, `${hint}-${i}`));
      return this.add(hint, `"[" ${parts.join(` ${this.comma} `)} "]"`);
    }
    const item = this.member(s.items ?? true, `${hint}-item`);
    const min = Math.min(nonNegInt(s.minItems) ?? 0, LENGTH_CAP);
    let max = nonNegInt(s.maxItems);
    if (max !== undefined && max > LENGTH_CAP) max = undefined;
    if (max !== undefined && max < min) max = min;
    if (max === 0) return '"[]"';
    const more = (lo: number, hi: number | undefined) =>
      hi === undefined ? (lo === 0 ? "*" : `{${lo},}`) : hi === lo ? (lo === 0 ? "" : `{${lo}}`) : `{${lo},${hi}}`;
    if (min === 0) {
      const rest = more(0, max === undefined ? undefined : max - 1);
      return this.add(hint, `"[" ( ${item}${rest === "" ? "" : ` ( ${this.comma} ${item} )${rest}`} )? "]"`);
    }
    const rest = more(min - 1, max === undefined ? undefined : max - 1);
    return this.add(hint, `"[" ${item}${rest === "" ? "" : ` ( ${this.comma} ${item} )${rest}`} "]"`);
  }
}

/**
 * The builder's grammar text as an and/or graph, to find rules that derive no finite text: a
 * sequence needs all its parts, an alternation one of them, a literal or character class is
 * finite, an optional or `*` part is finite whatever it holds. Linear in the grammar's size
 * (the classic productive-symbols propagation), so a big schema costs no more here than to build.
 */
class Derivations {
  /** Node kinds: a finite leaf, a rule reference, a sequence (all), an alternation (any), optional. */
  private kind: ("leaf" | "ref" | "all" | "any" | "opt")[] = [];
  private kids: number[][] = [];
  private ruleOf: (string | null)[] = [];

  private node(kind: "leaf" | "ref" | "all" | "any" | "opt", kids: number[] = [], rule: string | null = null): number {
    this.kind.push(kind);
    this.kids.push(kids);
    this.ruleOf.push(rule);
    return this.kind.length - 1;
  }

  /** One rule body or expression, in the syntax GrammarBuilder writes. */
  parse(text: string): number {
    let i = 0;
    const space = () => {
      while (i < text.length && text[i] === " ") i++;
    };
    const skipQuoted = (close: string) => {
      for (i++; i < text.length && text[i] !== close; i++) if (text[i] === "\\") i++;
      i++;
    };
    const alternation = (): number => {
      const alts = [sequence()];
      space();
      while (text[i] === "|") {
        i++;
        alts.push(sequence());
        space();
      }
      return alts.length === 1 ? alts[0] : this.node("any", alts);
    };
    const sequence = (): number => {
      const items: number[] = [];
      for (;;) {
        space();
        const c = text[i];
        if (c === undefined || c === "|" || c === ")") break;
        let item: number;
        if (c === '"') {
          skipQuoted('"');
          item = this.node("leaf");
        } else if (c === "[") {
          skipQuoted("]");
          item = this.node("leaf");
        } else if (c === "(") {
          i++;
          item = alternation();
          space();
          i++; // ")"
        } else {
          const m = /^[A-Za-z0-9-]+/.exec(text.slice(i, i + 64));
          if (!m) throw new Error(`grammar text not understood at ${i}: ${text.slice(i, i + 20)}`);
          i += m[0].length;
          item = this.node("ref", [], m[0]);
        }
        // Postfix repetition: with a minimum of 0 the part may be left out.
        const q = /^(\*|\+|\?|\{(\d+)(,\d*)?\})/.exec(text.slice(i, i + 24));
        if (q) {
          i += q[0].length;
          if (q[1] === "*" || q[1] === "?" || q[2] === "0") item = this.node("opt", [item]);
        }
        items.push(item);
      }
      return items.length === 1 ? items[0] : this.node("all", items);
    };
    return alternation();
  }

  /** Which nodes derive a finite text, given each rule's body node. */
  finite(bodies: Map<string, number>): boolean[] {
    const n = this.kind.length;
    const done = new Array<boolean>(n).fill(false);
    const waiting = new Array<number>(n).fill(0);
    const parents: number[][] = Array.from({ length: n }, () => []);
    const queue: number[] = [];
    for (let v = 0; v < n; v++) {
      const kids = this.kind[v] === "ref" ? [bodies.get(this.ruleOf[v]!) ?? -1] : this.kids[v];
      if (this.kind[v] === "leaf" || this.kind[v] === "opt" || (this.kind[v] === "all" && kids.length === 0)) {
        done[v] = true;
        queue.push(v);
        continue;
      }
      if (kids[0] === -1) continue; // a rule the grammar lacks: never finite
      waiting[v] = this.kind[v] === "all" ? kids.length : 1;
      for (const k of kids) parents[k].push(v);
    }
    while (queue.length > 0) {
      const v = queue.pop()!;
      for (const p of parents[v]) {
        if (done[p]) continue;
        if (--waiting[p] === 0 || this.kind[p] !== "all") {
          done[p] = true;
          queue.push(p);
        }
      }
    }
    return done;
  }

  /** The rules reachable from `root` (optional parts included) that are not finite, in the order met. */
  unending(root: number, bodies: Map<string, number>, finite: boolean[]): string[] {
    const seen = new Set<number>();
    const stack = [root];
    const found: string[] = [];
    while (stack.length > 0) {
      const v = stack.pop()!;
      if (seen.has(v)) continue;
      seen.add(v);
      if (this.kind[v] === "ref") {
        const body = bodies.get(this.ruleOf[v]!);
        if (!finite[v] && !found.includes(this.ruleOf[v]!)) found.push(this.ruleOf[v]!);
        if (body !== undefined) stack.push(body);
      } else stack.push(...this.kids[v]);
    }
    return found;
  }
}

/** `#`, `#/$defs/x`, `#/definitions/x` … (JSON pointer, ~0 ~1 and %-escapes) inside `root`. */
function resolvePointer(root: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  let cur: unknown = root;
  const path = ref.slice(1);
  if (path === "") return root;
  if (!path.startsWith("/")) return undefined;
  for (const raw of path.slice(1).split("/")) {
    let key: string;
    try {
      key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      return undefined;
    }
    if (Array.isArray(cur) && /^\d+$/.test(key)) cur = cur[Number(key)];
    else if (isObj(cur) && key in cur) cur = cur[key];
    else return undefined;
  }
  return cur;
}

/** A grammar whose sentences are exactly the JSON texts (in the fixed layout) the schema allows. */
export function schemaGrammar(schema: unknown): string {
  const b = new GrammarBuilder();
  const expr = b.schema(schema, "value");
  return b.text(expr);
}

/** The tools a forced tool_choice allows, or null when the choice is not forced (or nothing is offered). */
export function forcedTools(chat: Pick<ChatPrompt, "tools" | "tool_choice">): ToolSpec[] | null {
  const choice = chat.tool_choice;
  let tools: ToolSpec[] = [];
  if (choice.type === "required") tools = chat.tools;
  else if (choice.type === "tool") tools = chat.tools.filter((t) => t.name === choice.name);
  const seen = new Set<string>();
  tools = tools.filter((t) => !seen.has(t.name) && (seen.add(t.name), true));
  return tools.length > 0 ? tools : null;
}

export interface ToolCallGrammarOptions {
  /**
   * The prompt leaves a <think> block open (a template that always starts the answer thinking):
   * the grammar closes it at once, since a forced call comes without thinking (see engine.ts).
   */
  starts_in_thinking?: boolean;
  /**
   * The template speaks harmony (gpt-oss): the call is the message the model writes after the
   * prompt's "<|start|>assistant", `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS`,
   * ended by <|call|> (end of generation); ./harmony.ts reads it back.
   */
  harmony?: boolean;
}

/**
 * The grammar of one Hermes call to one of `tools`. Function tools take their parameters
 * schema; custom tools (raw string input) take the {"input": "…"} shape they are offered in
 * (src/chat/template.ts), which the parser unwraps back to the raw string.
 */
export function toolCallGrammar(tools: ToolSpec[], opts: ToolCallGrammarOptions = {}): string {
  if (tools.length === 0) throw new Error("toolCallGrammar: no tools");
  const b = new GrammarBuilder();
  const args = argumentRules(b, tools);
  refuseEndless(b, tools, args);
  const calls = tools.map((t, i) => {
    if (opts.harmony) return `${gbnfLiteral(`<|channel|>commentary to=functions.${t.name} <|constrain|>json<|message|>`)} ${args[i]}`;
    return `${gbnfLiteral(JSON.stringify(t.name) + ', "arguments": ')} ${args[i]}`;
  });
  const call = calls.length === 1 ? calls[0] : `( ${calls.join(" | ")} )`;
  if (opts.harmony) return b.text(call);
  const think = opts.starts_in_thinking ? `${gbnfLiteral("</think>\n\n")} ` : "";
  return b.text(`${think}${gbnfLiteral('<tool_call>\n{"name": ')} ${call} ${gbnfLiteral("}\n</tool_call>")}`);
}

/** A call of any of these tools must be able to end, since the model may choose any of them. */
function refuseEndless(b: GrammarBuilder, tools: ToolSpec[], args: string[]): void {
  b.endless(args).forEach((rule, i) => {
    if (rule === null) return;
    const ref = b.refOf(rule);
    throw new ToolSchemaError(
      tools[i].name,
      `${ref !== undefined ? `'${ref.slice(0, 100)}'` : "it"} can never end: every value it allows contains another one (a recursive schema whose required properties or non-empty arrays leave no base case)`,
    );
  });
}

/** Each tool's arguments as a grammar expression (a ToolSchemaError names one it cannot take). */
function argumentRules(b: GrammarBuilder, tools: ToolSpec[]): string[] {
  return tools.map((t) => {
    try {
      return t.kind === "custom"
        ? `${gbnfLiteral(`{"input"${b.separator}`)} ${b.prim("json-string")} "}"`
        : b.schema(t.parameters ?? { type: "object", properties: {} }, `${t.name}-args`);
    } catch (e) {
      if (e instanceof SchemaLimit) throw new ToolSchemaError(t.name, e.message);
      // A deep schema can still exhaust the stack in code outside the builder's depth count.
      if (e instanceof RangeError) throw new ToolSchemaError(t.name, "nested too deeply");
      throw e;
    }
  });
}

/** The tools a call under tool_choice auto may name: every offered one, once (null: no lazy grammar). */
export function autoTools(chat: Pick<ChatPrompt, "tools" | "tool_choice">): ToolSpec[] | null {
  if (chat.tool_choice.type !== "auto") return null;
  const seen = new Set<string>();
  const tools = chat.tools.filter((t) => !seen.has(t.name) && (seen.add(t.name), true));
  return tools.length > 0 ? tools : null;
}

/**
 * The most calls one answer under tool_choice auto may hold. A small model that has opened a call
 * can fall into writing calls without end (Qwen2.5-Coder-0.5B under Claude Code's tools wrote the
 * same two TaskOutput calls over and over until its 32k context was full, 13.8k tokens); agents'
 * real parallel calls are a handful (read a few files at once).
 */
export const MAX_AUTO_CALLS = 8;

/**
 * The call grammar of tool_choice auto: its sentences start where the output opens a call in one
 * of the family's forms (./tool-forms.ts) and are calls to one of `tools` with schema-valid
 * arguments, up to MAX_AUTO_CALLS in a row in the same form (one when opts.parallel is false), then end of
 * generation. Whitespace between the
 * opening's pieces as OPENING_GAP allows (the model already wrote it); after the name, the fixed
 * layout of the forced grammar.
 */
export function lazyToolCallGrammar(tools: ToolSpec[], family: ToolFamily, opts: { parallel?: boolean } = {}): string {
  const more = (x: string) => (opts.parallel === false ? "" : ` ( ${x} ){0,${MAX_AUTO_CALLS - 1}}`);
  if (tools.length === 0) throw new Error("lazyToolCallGrammar: no tools");
  // gpt-oss writes its arguments as compact JSON; a grammar that asked for spaces would take
  // every call it opens away from it at the first separator.
  const b = new GrammarBuilder(family === "harmony");
  const args = argumentRules(b, tools);
  refuseEndless(b, tools, args);
  const ws = b.add("ws", `[ \\t\\r\\n]{0,${OPENING_GAP}}`);
  const gapped = (pieces: string[]) => pieces.map(gbnfLiteral).join(` ${ws} `);
  if (family === "harmony") {
    // gpt-oss puts the recipient in the role or the channel part of the header; either way the
    // name, then what may come before the message: a channel, a content type.
    const tail = b.add("recipient-tail", `${gbnfLiteral("<|channel|>commentary")}? ( ${gbnfLiteral(" <|constrain|>json")} | ${gbnfLiteral(" json")} )? ${gbnfLiteral("<|message|>")}`);
    const calls = tools.map((t, i) => `${gbnfLiteral(t.name)} ${tail} ${args[i]}`);
    return b.text(`${gbnfLiteral("to=functions.")} ${b.add("recipient-call", calls.join(" | "))}`);
  }
  const named = b.add("named-call", tools.map((t, i) => `${gbnfLiteral(JSON.stringify(t.name) + ', "arguments": ')} ${args[i]}`).join(" | "));
  // One call object from its opening brace; the opening's own pieces come first.
  const object = b.add("call-object", `${gapped(["{", '"name"', ":"])} ${ws} ${named} "}"`);
  const forms: string[] = [];
  for (const o of CALL_OPENINGS[family]) {
    if (o.form === "tag") {
      const block = `${gbnfLiteral("<tool_call>")} ${ws} ${object} ${ws} ${gbnfLiteral("</tool_call>")}`;
      forms.push(`${block}${more(`${ws} ${block}`)} ${ws}`);
    } else if (o.form === "bare") forms.push(`${object}${more(`${ws} ${object}`)} ${ws}`);
    else if (o.form === "fence") forms.push(`${gbnfLiteral(o.pieces[0])} ${ws} ${object}${more(`${ws} ${object}`)} ${ws} ${gbnfLiteral("```")} ${ws}`);
  }
  return b.text(forms.join(" | "));
}
