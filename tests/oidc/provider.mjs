// A real authorization server for the OAuth tests: oidc-provider with the dev login and consent pages, a few
// clients, and JWT access tokens for the resource (mcp-batch) each carrying a `tenant` claim.
//
// Configured by one JSON file named on the command line (written by tests/oidc_provider.py):
//   {"port", "jwks": {"keys": [...private JWKs]}, "clients": [...oidc-provider client metadata + "tenant"],
//    "opaque_clients": [client ids whose access tokens are opaque, not JWTs], "ttl": seconds}
// Any resource indicator (RFC 8707) is served: the token's audience is the resource asked for.
// A login of the form "name@tenant" at the dev login page signs in a user of that tenant; one without "@" has no
// tenant (its tokens carry no tenant claim).
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

function tenantOf(token, client) {
  if (token.accountId) {
    const at = token.accountId.indexOf('@');
    return at === -1 ? undefined : token.accountId.slice(at + 1);
  }
  return client?.tenant;
}

const provider = new Provider(issuer, {
  jwks: config.jwks,
  clients: config.clients,
  extraClientMetadata: { properties: ['tenant'] },
  clientDefaults: { id_token_signed_response_alg: 'ES256', grant_types: ['authorization_code'], response_types: ['code'] },
  clientBasedCORS: () => true,
  pkce: { required: () => true },
  scopes: ['openid', 'offline_access', 'read', 'write', 'admin', 'credentials', 'profile'],
  findAccount: (ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator, client) => {
        const opaque = config.opaque_clients.includes(client.clientId);
        return {
          scope: 'read write admin credentials profile',
          audience: indicator,
          accessTokenTTL: config.ttl,
          accessTokenFormat: opaque ? 'opaque' : 'jwt',
          ...(opaque ? {} : { jwt: { sign: { alg: 'ES256' } } }),
        };
      },
    },
  },
  extraTokenClaims: (ctx, token) => {
    const tenant = tenantOf(token, ctx.oidc.client);
    return tenant === undefined ? undefined : { tenant };
  },
});
provider.listen(config.port, '127.0.0.1', () => console.log(`listening ${issuer}`));
