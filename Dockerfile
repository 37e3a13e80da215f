# The better-compute image: one image for `controller`, `agent` and the CLI subcommands.
#
#   docker build -t better-compute:0.1.0 .      where a registry is reachable (pulls node:20-bookworm-slim)
#   npm run image                               offline: scripts/image/build.sh makes the base from Debian and the npm
#                                               registry, tags it node:20-bookworm-slim, and builds this same file
#
# Both stages use the same base. The final one runs as uid/gid 65532 with a read-only root filesystem: only /tmp and
# the data directory (/var/lib/better-compute, for the embedded PostgreSQL) need to be writable volumes.

FROM node:20-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# Where the registry is reached through a TLS-intercepting proxy, its CA certificates (PEM) for npm, in this stage only
# (scripts/image/build.sh passes the host's local CAs, /usr/local/share/ca-certificates).
ARG NPM_EXTRA_CA=""
RUN if [ -n "$NPM_EXTRA_CA" ]; then \
      printf '%s\n' "$NPM_EXTRA_CA" > /tmp/npm-extra-ca.pem && export NODE_EXTRA_CA_CERTS=/tmp/npm-extra-ca.pem; \
    fi \
 && npm ci --no-audit --no-fund --update-notifier=false --loglevel=warn
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund --update-notifier=false --loglevel=warn

FROM node:20-bookworm-slim
# PostgreSQL's initdb and postgres look the running uid up in /etc/passwd; 65532 gets a name and a home in /tmp.
RUN echo 'nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'nonroot:x:65532:' >> /etc/group \
 && mkdir -p /var/lib/better-compute \
 && chown 65532:65532 /var/lib/better-compute \
 && chmod 0700 /var/lib/better-compute
ENV NODE_ENV=production \
    TMPDIR=/tmp \
    HOME=/tmp \
    BETTER_COMPUTE_DATA_DIR=/var/lib/better-compute
WORKDIR /app
# package.json says "type": "module" for dist/; the runtime reads migrations/ and proto/ next to dist/.
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY migrations ./migrations
COPY proto ./proto
VOLUME ["/var/lib/better-compute"]
USER 65532:65532
ENTRYPOINT ["node", "/app/dist/cli/main.js"]
CMD ["--help"]
