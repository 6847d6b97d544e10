// Stop strings across token boundaries. Generated text arrives in pieces; a piece that ends
// with the start of a stop string is held back until the next piece settles whether the stop
// matched. Pure: no engine state, so in-memory test engines use the same matcher.
//
// The stop strings are one Aho-Corasick automaton, fed each piece once: a piece costs its own
// length whatever the number of stop strings (scanning the list per piece let one request with
// many stop strings slow every other request on the engine's thread). The automaton's state is
// the longest end of the text so far that begins a stop string, which is exactly the text to
// hold back, so the held text is never copied or rescanned.

import { FIELD_LIMITS } from "../generated/limits.js";

/** Most stop strings a request may give (openapi.json: maxItems of stop / stop_sequences). */
export const MAX_STOP_STRINGS: number = FIELD_LIMITS.stop.maxItems;
/** Longest stop string, in characters (openapi.json: maxLength). */
export const MAX_STOP_LENGTH: number = FIELD_LIMITS.stop.maxLength;

/** The trie of the stop strings with its failure links; built on the first piece, not while queued. */
class Automaton {
  /** node * 65536 + UTF-16 code unit → child node. Node 0 is the root (nothing matched). */
  private readonly next = new Map<number, number>();
  /** Per node: characters matched. */
  private readonly depth: Int32Array;
  /** Per node: the node of its longest proper suffix in the trie. */
  private readonly fail: Int32Array;
  /** Per node: the stop string it is a prefix of (to spell held text), and the longest stop string ending here (-1 none). */
  private readonly source: Int32Array;
  private readonly ending: Int32Array;
  /** Longest stop string. */
  readonly longest: number;

  constructor(readonly stops: readonly string[]) {
    let total = 1;
    for (const s of stops) total += s.length;
    this.depth = new Int32Array(total);
    this.fail = new Int32Array(total);
    this.source = new Int32Array(total);
    this.ending = new Int32Array(total).fill(-1);
    let nodes = 1;
    let longest = 0;
    stops.forEach((s, k) => {
      longest = Math.max(longest, s.length);
      let v = 0;
      for (let i = 0; i < s.length; i++) {
        const key = v * 65536 + s.charCodeAt(i);
        let child = this.next.get(key);
        if (child === undefined) {
          child = nodes++;
          this.next.set(key, child);
          this.depth[child] = i + 1;
          this.source[child] = k;
        }
        v = child;
      }
      if (this.ending[v] < 0) this.ending[v] = k;
    });
    this.longest = longest;
    // Failure links breadth first, by depth: a node's link is shallower, so it is done before.
    const byDepth: number[][] = [];
    for (const [key, child] of this.next) (byDepth[this.depth[child]] ??= []).push(key);
    for (let d = 1; d < byDepth.length; d++) {
      for (const key of byDepth[d] ?? []) {
        const child = this.next.get(key)!;
        const parent = Math.floor(key / 65536);
        const c = key % 65536;
        this.fail[child] = parent === 0 ? 0 : this.step(this.fail[parent], c);
        // The longest stop string ending here: this node's own, else its suffix's.
        if (this.ending[child] < 0) this.ending[child] = this.ending[this.fail[child]];
      }
    }
  }

  /** The state after `c` from state `v`. */
  step(v: number, c: number): number {
    for (;;) {
      const child = this.next.get(v * 65536 + c);
      if (child !== undefined) return child;
      if (v === 0) return 0;
      v = this.fail[v];
    }
  }

  depthOf(v: number): number {
    return this.depth[v];
  }

  /** The stop string that ends at state `v` (the longest), or -1. */
  endingAt(v: number): number {
    return this.ending[v];
  }

  /** The text state `v` stands for: the end of the output that begins a stop string. */
  textOf(v: number): string {
    return v === 0 ? "" : this.stops[this.source[v]].slice(0, this.depth[v]);
  }
}

export class StopMatcher {
  private readonly stops: string[];
  private automaton: Automaton | null = null;
  private state = 0;

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  /**
   * Feeds generated text. Returns what may be released now and, when a stop string matched,
   * which one (the generation ends there; nothing after it is ever released). Of the stop
   * strings found in the held text and this piece, the earliest wins; at one position the
   * longest.
   */
  push(text: string): { text: string; stop: string | null } {
    if (this.stops.length === 0) return { text, stop: null };
    const a = (this.automaton ??= new Automaton(this.stops));
    const held = a.depthOf(this.state);
    const heldText = held > 0 ? a.textOf(this.state) : "";
    // Positions below count in held text + this piece.
    let v = this.state;
    let bestStart = -1;
    let bestStop = -1;
    for (let i = 0; i < text.length; i++) {
      v = a.step(v, text.charCodeAt(i));
      const k = a.endingAt(v);
      if (k >= 0) {
        const end = held + i + 1;
        const start = end - a.stops[k].length;
        if (bestStart < 0 || start < bestStart || (start === bestStart && a.stops[k].length > a.stops[bestStop].length)) {
          bestStart = start;
          bestStop = k;
        }
      }
      // A later match ends later; one that started earlier would be longer than any stop string.
      if (bestStart >= 0 && held + i + 1 - a.longest >= bestStart) break;
    }
    if (bestStop >= 0) {
      this.state = 0;
      const before = bestStart <= held ? heldText.slice(0, bestStart) : heldText + text.slice(0, bestStart - held);
      return { text: before, stop: a.stops[bestStop] };
    }
    this.state = v;
    // Everything but what the new state holds back is released.
    const release = held + text.length - a.depthOf(v);
    return { text: release <= held ? heldText.slice(0, release) : heldText + text.slice(0, release - held), stop: null };
  }

  /** The generation ended without a match: the held-back text is ordinary output. */
  flush(): string {
    const t = this.automaton ? this.automaton.textOf(this.state) : "";
    this.state = 0;
    return t;
  }
}
