# Berth's image, ghcr.io/berth-dev/berth:<package.json version> (deploy/ refers to that name), for
# users with a container engine:
#   docker build -t ghcr.io/berth-dev/berth:$(npm pkg get version | tr -d '"') .
# Without one, `npm run image -- --tag REF` assembles the same runtime for linux/amd64 and linux/arm64
# from Debian packages and the npm node binary with crane (decision 0035; image.test.ts boots it).
# It runs `node dist/cli/main.js run` as the non-root user 65532 on a read-only root filesystem.

FROM node:24-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` would build before the sources are here, and the devDependency `node`
# (the runtime pinned for checkouts) would download a second Node.js the image does not need.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json tsconfig.page.json ./
COPY src ./src
# `npm run build`: tsc, then zod bundled alone (scripts/bundle-zod.ts, decision 0055), then the page.
COPY scripts/bundle-zod.ts ./scripts/
RUN npm run build

FROM node:24-slim
LABEL org.opencontainers.image.title="berth" org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /app
ENV NODE_ENV=production
# Two malloc arenas instead of glibc's 8 per core: Node's helper threads otherwise each grow one,
# and the labels job at 1,000 nodes held 7 MB more on average, with a wider spread (decision 0021).
ENV MALLOC_ARENA_MAX=2
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /src/dist ./dist
# Numeric, so that the kubelet can verify runAsNonRoot.
USER 65532:65532
# V8's optimize-for-size: the labels job at 1,000 nodes holds about 100 MB resident instead of 140
# (issue 17). Of V8's compilers only the interpreter and the optimizing top tier (TurboFan): without
# the two in between (Sparkplug, Maglev) every job holds 3-6 MB less (decision 0053). Every full
# collection compacts the old generation, so the pages the start-up's garbage held go back at once,
# not 8 s after the last collection (decision 0054). npm run bench:memory runs Berth with these
# flags. The young generation keeps V8's default size: held to 2 MB it saved nothing more and cost
# the webhook thread its tail (decision 0023).
ENTRYPOINT ["node", "--optimize-for-size", "--no-maglev", "--no-sparkplug", "--compact-on-every-full-gc", "dist/cli/main.js"]
CMD ["run"]
