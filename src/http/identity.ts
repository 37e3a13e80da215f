// Who sent a request: the bearer token it carries, and the principal an authorizer found behind it.

export interface Principal {
  /** The user name (Kubernetes) or the token file's subject. */
  readonly subject: string;
  readonly uid?: string;
  readonly groups?: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
}

/** `Authorization: Bearer <token>` → the token; anything else → undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(header);
  return m?.[1];
}
