// Stop strings across token boundaries. Generated text arrives in pieces; a piece that ends
// with the start of a stop string is held back until the next piece settles whether the stop
// matched. Pure: no engine state, so in-memory test engines use the same matcher.
export class StopMatcher {
  private readonly stops: string[];
  private held = "";

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  /**
   * Feeds generated text. Returns what may be released now and, when a stop string matched,
   * which one (the generation ends there; nothing after it is ever released).
   */
  push(text: string): { text: string; stop: string | null } {
    const pending = this.held + text;
    this.held = "";
    if (this.stops.length === 0) return { text: pending, stop: null };
    let at = -1;
    let stop: string | null = null;
    for (const s of this.stops) {
      const i = pending.indexOf(s);
      // The earliest match wins; at one position the longest stop string.
      if (i >= 0 && (at < 0 || i < at || (i === at && s.length > stop!.length))) {
        at = i;
        stop = s;
      }
    }
    if (stop !== null) return { text: pending.slice(0, at), stop };
    const keep = heldPrefix(pending, this.stops);
    this.held = pending.slice(pending.length - keep);
    return { text: pending.slice(0, pending.length - keep), stop: null };
  }

  /** The generation ended without a match: the held-back text is ordinary output. */
  flush(): string {
    const t = this.held;
    this.held = "";
    return t;
  }
}

/**
 * Length of the longest suffix of `text` that is a proper prefix of one of `needles`: text that
 * must be held back until more arrives (stop strings here, <think>/<tool_call> tags in the
 * output parser).
 */
export function heldPrefix(text: string, needles: readonly string[]): number {
  let best = 0;
  for (const s of needles) {
    for (let n = Math.min(s.length - 1, text.length); n > best; n--) {
      if (text.endsWith(s.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}
