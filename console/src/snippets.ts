/** Signature verification snippets for the Standard Webhooks libraries, shown as text. */

export interface Snippet {
  readonly language: string;
  readonly code: string;
}

export const VERIFY_SNIPPETS: readonly Snippet[] = [
  {
    language: 'JavaScript',
    code: `// npm install standardwebhooks
import { Webhook } from "standardwebhooks";

// secret: "whsec_..."; payload: the raw request body as received (a string);
// headers: the request's headers (webhook-id, webhook-timestamp, webhook-signature)
const event = new Webhook(secret).verify(payload, headers); // throws when it does not verify`,
  },
  {
    language: 'Python',
    code: `# pip install standardwebhooks
from standardwebhooks.webhooks import Webhook

# secret: "whsec_..."; payload: the raw request body; headers: the request's headers
event = Webhook(secret).verify(payload, headers)  # raises when it does not verify`,
  },
  {
    language: 'Go',
    code: `import standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

// secret: "whsec_..."; payload: the raw body ([]byte); headers: r.Header
wh, _ := standardwebhooks.NewWebhook(secret)
err := wh.Verify(payload, headers) // nil when it verifies`,
  },
];
