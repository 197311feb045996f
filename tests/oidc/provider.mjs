// A real OpenID Connect provider for the school sign-in tests (tests/browser/test_school_sign_in.py):
// panva's oidc-provider, the certified implementation, on loopback. Nothing of the protocol is
// faked: discovery, the authorization code flow with PKCE, the token endpoint, signed ID tokens,
// JWKS and userinfo are the library's own. Only the sign-in page is ours: it asks for an email
// and signs in the account of that email from OIDC_ACCOUNTS (consent granted at once, as a
// school's Workspace or Entra tenant does for an app its admin approved).
//
// Environment: OIDC_PORT, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI (comma-separated) and
// OIDC_ACCOUNTS (a JSON file: {"email": {claims...}}, e.g. {"ada@school.example":
// {"email_verified": true, "hd": "school.example", "name": "Ada"}}). Prints "ready <issuer>".
import { readFileSync } from "node:fs";
import * as oidc from "oidc-provider";

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(readFileSync(process.env.OIDC_ACCOUNTS, "utf8"));

const provider = new oidc.Provider(issuer, {
  clients: [{
    client_id: process.env.OIDC_CLIENT_ID,
    client_secret: process.env.OIDC_CLIENT_SECRET,
    redirect_uris: process.env.OIDC_REDIRECT_URI.split(","),
    token_endpoint_auth_method: "client_secret_post",
  }],
  // Google's `hd` and Entra's `tid` (and Entra's `xms_edov`) travel with the openid scope, in the
  // ID token as well as userinfo, as those providers put them.
  claims: {
    openid: ["sub", "hd", "tid", "xms_edov"],
    email: ["email", "email_verified"],
    profile: ["name", "given_name", "family_name"],
  },
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    if (!(id in accounts)) return undefined;
    return { accountId: id, async claims() { return { sub: id, email: id, ...accounts[id] }; } };
  },
});

const page = (uid, error) => `<!doctype html><html><head><title>Test school sign-in</title></head><body>
<h1>Test school</h1>${error ? `<p role="alert">${error}</p>` : ""}
<form method="post" action="/interaction/${uid}"><label for="email">Email</label>
<input id="email" name="email" type="email" required><button type="submit">Next</button></form></body></html>`;

async function readForm(req) {
  let body = "";
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)$/);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  if (ctx.method === "GET") {
    ctx.type = "html";
    ctx.body = page(details.uid);
    return undefined;
  }
  const email = (await readForm(ctx.req)).get("email") || "";
  if (!(email in accounts)) {
    ctx.type = "html";
    ctx.body = page(details.uid, "No such account.");
    return undefined;
  }
  const grant = new provider.Grant({ accountId: email, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: email }, consent: { grantId } },
    { mergeWithLastSubmission: false });
  return undefined;
});

provider.listen(port, "127.0.0.1", () => console.log(`ready ${issuer}`));
