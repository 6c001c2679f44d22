// A real OpenID Connect provider for the test suite: the certified `oidc-provider`
// package (package.json) with a small configuration. Started by tests/sso/providers.py.
//
//   node tests/sso/oidc_provider.mjs PORT ACCOUNTS_JSON
//
// ACCOUNTS_JSON maps a login name to its claims, e.g. {"ada": {"groups": ["gpu-alpha"]}};
// it is read again on every sign-in, so a test changes a user's groups by rewriting it.
// The provider's own development login page accepts any password for a listed account.
// Clients: `berth` (confidential, the portal), `berth-short` (ID tokens live 2 s, for
// the expiry test) and `berth-other` (a different audience).
import fs from 'node:fs';

import Provider from 'oidc-provider';

const [port, accountsFile] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

function accounts() {
  return JSON.parse(fs.readFileSync(accountsFile, 'utf8'));
}

const client = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
  response_types: ['code'],
  redirect_uris: ['http://testserver/oidc/callback/'],
  post_logout_redirect_uris: ['http://testserver/login/'],
});

const provider = new Provider(issuer, {
  clients: [client('berth'), client('berth-short'), client('berth-other')],
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups', 'offline_access'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  features: {
    devInteractions: { enabled: true },
    deviceFlow: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  ttl: {
    IdToken: (ctx, token, cl) => (cl && cl.clientId === 'berth-short' ? 2 : 3600),
  },
  cookies: { keys: ['berth-test-cookie-key'] },
  async findAccount(ctx, id) {
    const claims = accounts()[id];
    if (!claims) {
      return undefined;
    }
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, email: `${id}@example.com`, ...claims };
      },
    };
  },
});

// The portal under test listens on a port chosen at random (Django's live server), so
// redirect URIs on this machine are matched without their port, as RFC 8252 does for
// native clients. Test harness only.
const sameButPort = (value, allowed) => {
  const strip = (uri) => uri.replace(/^(http:\/\/(localhost|127\.0\.0\.1|testserver))(:\d+)?/, '$1');
  return allowed.some((uri) => strip(uri) === strip(value))
    || allowed.some((uri) => strip(uri).replace('testserver', 'localhost') === strip(value))
    || allowed.some((uri) => strip(uri).replace('testserver', '127.0.0.1') === strip(value));
};
provider.Client.prototype.redirectUriAllowed = function redirectUriAllowed(value) {
  return sameButPort(value, this.redirectUris);
};
provider.Client.prototype.postLogoutRedirectUriAllowed = function allowed(value) {
  return sameButPort(value, this.postLogoutRedirectUris);
};

provider.listen(Number(port), '127.0.0.1', () => {
  process.stdout.write(`listening ${issuer}\n`);
});
