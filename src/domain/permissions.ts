/**
 * Permissions a role can grant. Roles are open-ended (operators add them), permissions are
 * not: each one guards a concrete operation, and anything not granted is denied.
 */
export const Permission = {
  rolesRead: 'roles:read',
  usersManage: 'users:manage',
  webhookRead: 'webhook:read',
  webhookManage: 'webhook:manage',
  /** Reading the organization's audit trail (GET /audit/list). */
  auditRead: 'audit:read',
  /** Creating, listing and revoking the organization's API keys (api_keys/*). */
  apiKeysManage: 'api_keys:manage',
} as const;
export type Permission = (typeof Permission)[keyof typeof Permission];

export const ALL_PERMISSIONS: readonly Permission[] = Object.values(Permission);

export function isPermission(value: string): value is Permission {
  return (ALL_PERMISSIONS as readonly string[]).includes(value);
}

/** Roles seeded by the first migration (saas_admin was granted audit:read by SQLite's migration 14 and PostgreSQL's 8, api_keys:manage by 15 and 9). */
export const BUILTIN_ROLES = [
  {
    name: 'saas_admin',
    description: 'read plus specific modifications for the associated SaaS',
    permissions: [Permission.rolesRead, Permission.usersManage, Permission.webhookRead, Permission.webhookManage, Permission.auditRead, Permission.apiKeysManage],
  },
  {
    name: 'saas_viewer',
    description: 'view-only access to the SaaS resources',
    permissions: [Permission.rolesRead, Permission.webhookRead],
  },
] as const;
