// Server settings that handlers of the core need but that are not part of the agreed AppDeps
// (the --ui page, --cache-ram). Kept beside the deps object instead of in a global, so two
// apps in one process (tests) never see each other's settings.
import type { AppDeps } from "../app/context.js";

export interface ServerInfo {
  ui: boolean;
  cache_ram_mib: number;
  /** Whether the engine reuses cached prompt starts (Model.prefix_cache). */
  prefix_cache: boolean;
}

const infos = new WeakMap<AppDeps, ServerInfo>();

export function setServerInfo(deps: AppDeps, info: ServerInfo): void {
  infos.set(deps, info);
}

export function serverInfo(deps: AppDeps): ServerInfo {
  return infos.get(deps) ?? { ui: false, cache_ram_mib: 0, prefix_cache: true };
}
