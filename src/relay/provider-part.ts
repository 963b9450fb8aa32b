import { createProviderFetch } from '../dispatch/provider-fetch.ts';
import { ProviderKeys } from '../services/provider-keys.ts';
import type { DaemonPart } from './parts.ts';
import type { Wiring } from './wiring.ts';

/**
 * The identity provider's keys (auth.provider), fetched before the admin API serves. A provider
 * that cannot be reached does not stop the start: the daemon's own tokens work, and /readyz
 * answers 503 identity_provider_unreachable until its keys are fetched (docs/operations.md).
 */
export function identityProvider(w: Wiring): DaemonPart {
  return {
    name: 'identity provider keys',
    async start() {
      const { provider } = w.config.auth;
      if (provider.issuer === null) return;
      const fetch = createProviderFetch({ caFile: provider.caFile, allowNetworks: provider.allowNetworks, timeoutMs: provider.fetchTimeout });
      const keys = w.providerKeys.set(new ProviderKeys({ config: provider, fetch, clock: w.clock, log: w.log.child({ subsystem: 'identity-provider' }) }));
      await keys.start();
    },
    stop() {
      w.providerKeys.take()?.stop();
    },
  };
}
