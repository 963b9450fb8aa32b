import { iso } from '../../domain/iso.ts';
import { Permission } from '../../domain/permissions.ts';
import { receiverAuthSentence, secretRotationView, webhookHealthView, webhookView } from '../../services/views.ts';
import type { WebhookService } from '../../services/webhooks.ts';
import { parseRequest } from '../request-validation.ts';
import { RegisterWebhookRequest } from '../schemas/requests.ts';
import type { Answer, SecretRotation, WebhookRegistration, WebhookSecret } from '../schemas/answers.ts';
import type { SecuredRouter } from '../secured-router.ts';

export function registerWebhookRoutes(router: SecuredRouter, services: { webhooks: WebhookService }): void {
  router.route(
    ['POST', 'PUT'],
    '/webhook/register_webhook',
    Permission.webhookManage,
    async (ctx, principal, by) => {
      const raw = ctx.state.body as Record<string, unknown>;
      // The credentials for the receiver are checked by the service alone, which names the field
      // at fault inside them (client_certificate.private_key, oauth2.token_url); the schema
      // describes them for the document.
      const body = parseRequest(RegisterWebhookRequest, { ...raw, client_certificate: undefined, oauth2: undefined }, 'the request body is invalid');
      // The headers as sent, in their order: the object zod rebuilds cannot hold a name such as
      // __proto__, which is an HTTP token like any other.
      const result = await services.webhooks.register(by, principal.orgId, { ...body, headers: raw.headers, client_certificate: raw.client_certificate, oauth2: raw.oauth2 });
      const { webhook } = result;
      let message = result.created
        ? `Webhook registered: status changes of anticipation requests will be sent to ${webhook.url}`
        : `Webhook replaced: ${result.replacedUrl} was replaced by ${webhook.url} (one webhook per organization)`;
      if (webhook.activeHmac) {
        message += result.newSecret
          ? '. HMAC signing is on: give the secret below to your receiver, which verifies signatures with it (an admin can read it again with GET /webhook/get_secret)'
          : '. HMAC signing is on with the existing secret';
      } else {
        message += '. HMAC signing is off';
      }
      // A registration describes the whole webhook: say so when it dropped headers the webhook had.
      if (result.removedHeaders.length > 0) message += `. Headers no longer sent (this registration did not set them): ${result.removedHeaders.join(', ')}`;
      message += receiverAuthSentence(webhook);
      ctx.status = result.created ? 201 : 200;
      ctx.body = { message, ...webhookView(webhook), ...(result.newSecret ? { secret: result.newSecret } : {}) } satisfies Answer<typeof WebhookRegistration>;
    },
    { body: true },
  );

  router.route(['GET'], '/webhook/get_webhook', Permission.webhookRead, async (ctx, principal) => {
    const { webhook, health, previousSecretExpiresAt } = await services.webhooks.getWithHealth(principal.orgId);
    ctx.body = { ...webhookView(webhook), ...webhookHealthView(health), ...secretRotationView(previousSecretExpiresAt) };
  });

  router.route(['GET'], '/webhook/get_secret', Permission.webhookManage, async (ctx, principal) => {
    ctx.body = { secret: await services.webhooks.getSecret(principal.orgId) } satisfies Answer<typeof WebhookSecret>;
  });

  router.route(['POST'], '/webhook/rotate_secret', Permission.webhookManage, async (ctx, principal, by) => {
    const { secret, previousSecretExpiresAt } = await services.webhooks.rotateSecret(by, principal.orgId);
    ctx.body = {
      message: 'Signing secret rotated: give the new secret to your receiver (an admin can read it again with GET /webhook/get_secret); the previous one keeps signing until previous_secret_expires_at',
      secret,
      previous_secret_expires_at: iso(previousSecretExpiresAt),
    } satisfies Answer<typeof SecretRotation>;
  });

  // Disabling holds the webhook's deliveries (kept, not dropped); enabling lets them go out and
  // starts the failure count over. The same as `hookrelay webhook disable|enable`.
  for (const [action, enabled] of [['disable', false], ['enable', true]] as const) {
    router.route(['POST'], `/webhook/${action}`, Permission.webhookManage, async (ctx, principal, by) => {
      await services.webhooks.setEnabled(by, principal.orgId, enabled);
      const { webhook, health, previousSecretExpiresAt } = await services.webhooks.getWithHealth(principal.orgId);
      ctx.body = {
        message: enabled ? 'Webhook enabled: held deliveries go out' : 'Webhook disabled: its deliveries are held, not dropped, until it is enabled',
        ...webhookView(webhook),
        ...webhookHealthView(health),
        ...secretRotationView(previousSecretExpiresAt),
      };
    });
  }
}
