// The Health object GET /v1/health, /health and / answer with.
import type { AppDeps } from "../app/context.js";
import type { components } from "../generated/types.js";
import { serverInfo } from "./server-info.js";

type Health = components["schemas"]["MashboxHealth"];

export function isReady(deps: AppDeps): boolean {
  return deps.engine.state === "ready";
}

// This engine has no routed-expert kernel: each expert a chunk selects runs as a dense GEMM over
// the rows routed to it (native/model/transformer.cpp, run_experts), so every site is on the
// exact path. Null until an expert call has run (and always for a dense model).
function routedExperts(calls: Record<string, number> | undefined): Health["routed_experts"] {
  if (!calls || !Object.values(calls).some((n) => n > 0)) return null;
  const ran = Object.fromEntries(Object.entries(calls).filter(([, n]) => n > 0));
  return {
    path: "exact",
    kernel: null,
    sites: { exact: ran },
    exact_why: "no routed-expert kernel in this build: each selected expert runs as a dense GEMM over the rows routed to it",
  };
}

export function healthBody(deps: AppDeps): Health {
  const ready = isReady(deps);
  const s = deps.engine.stats();
  const info = serverInfo(deps);
  const body: Health = {
    status: ready ? "ok" : "loading",
    live_rows: ready ? s.slots_in_use : null,
    waiting: s.waiting,
    // State points are blocks of the host cache itself (native/engine/prompt_cache.h), shared
    // with every prompt that starts the same way, so no snapshot bytes exist beside it.
    cache_bytes: s.host_cache_bytes ?? 0,
    host_cache_bytes: s.host_cache_bytes ?? 0,
    snapshot_bytes: 0,
    // The worker's own figure once it runs (0 when the model cannot save its state).
    host_cache_cap_bytes: s.host_cache_cap_bytes ?? info.cache_ram_mib * 1024 * 1024,
    host_cache_evictions: s.host_cache_evictions ?? 0,
    host_cache_disk_bytes: s.host_cache_disk_bytes ?? 0,
    host_cache_disk_cap_bytes: s.host_cache_disk_cap_bytes ?? 0,
    host_cache_disk_hits: s.host_cache_disk_hit_tokens ?? 0,
    host_cache_disk_evictions: s.host_cache_disk_evictions ?? 0,
    cache_namespace: s.cache_namespace ?? null,
    deployment_id: s.deployment_id ?? null,
    component_set_sha: s.component_set_sha ?? null,
    // The gate runs while the model loads; a set that fails it never becomes ready.
    certification: s.certification ?? "pending",
    // null before the engine was first ready; the same figure as mashbox:compiles_after_ready_total.
    compiles_after_ready: s.compiles_after_ready ?? null,
    routed_experts: routedExperts(s.routed_expert_calls),
    spec: deps.engine.model.spec ?? "off",
    draft_model: deps.engine.model.draft_model ?? null,
    worker_restarts: s.worker_restarts,
  };
  if (s.worker_pid !== null) body.worker_pid = s.worker_pid;
  return body;
}
