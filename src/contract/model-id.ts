// openapi.json marks where the running model's id belongs with a placeholder string (see its
// top-level x-mashbox-model-id note); the server fills it in before serving GET /openapi.json.

export const MODEL_ID_PLACEHOLDER = "x-mashbox-model-id";

/**
 * A deep copy of `doc` with every string value equal to the placeholder replaced by `model_id`,
 * and every JSON string literal of it inside a string (the JSON text of an SSE example's data).
 * Keys, and the note that documents the placeholder (keyed by it), are left alone so the served
 * document still says what was filled in.
 */
export function fillModelId<T>(doc: T, model_id: string): T {
  const quoted = JSON.stringify(MODEL_ID_PLACEHOLDER);
  const walk = (v: unknown): unknown => {
    if (v === MODEL_ID_PLACEHOLDER) return model_id;
    if (typeof v === "string" && v.includes(quoted)) return v.split(quoted).join(JSON.stringify(model_id));
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === "object") {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, k === MODEL_ID_PLACEHOLDER ? x : walk(x)]));
    }
    return v;
  };
  return walk(doc) as T;
}
