#!/usr/bin/env bash
# Builds the test cluster's container images locally, as docker-archive tarballs that `ctr images import` reads:
#   bettercompute.local/pause:v1    the pod sandbox image (images/pause, a static Go program)
#   bettercompute.local/busybox:v1  Debian's busybox-static with its applets linked into /bin, for test pods
# Nothing is pulled. Usage: build-images.sh OUT_DIR   (writes OUT_DIR/pause.tar and OUT_DIR/busybox.tar)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: build-images.sh OUT_DIR}"
busybox=/bin/busybox
[[ -x "$busybox" ]] || { echo "build-images.sh: $busybox missing (apt-get install busybox-static)" >&2; exit 1; }
file -b "$busybox" 2>/dev/null | grep -q 'statically linked' || ldd "$busybox" 2>&1 | grep -q 'not a dynamic' \
  || { echo "build-images.sh: $busybox is not static (install busybox-static)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# make_image NAME REF ROOTFS_DIR CONFIG_JSON_FRAGMENT
make_image() {
  local name="$1" ref="$2" rootfs="$3" cfg="$4" d="$work/$1-archive"
  mkdir -p "$d/layer"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$d/layer/layer.tar" .
  local diff_id
  diff_id="$(sha256sum "$d/layer/layer.tar" | cut -d' ' -f1)"
  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$cfg" "$diff_id" > "$d/config.json"
  local cfg_id
  cfg_id="$(sha256sum "$d/config.json" | cut -d' ' -f1)"
  mv "$d/config.json" "$d/$cfg_id.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer/layer.tar"]}]' "$cfg_id" "$ref" > "$d/manifest.json"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$d" -cf "$out/$name.tar.tmp" manifest.json "$cfg_id.json" layer
  mv "$out/$name.tar.tmp" "$out/$name.tar"
}

# pause
mkdir -p "$work/pause-root"
(cd "$here/pause" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags='-s -w' -o "$work/pause-root/pause" .)
make_image pause bettercompute.local/pause:v1 "$work/pause-root" '{"Entrypoint":["/pause"]}'

# busybox
r="$work/busybox-root"
mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root" "$r/proc" "$r/sys" "$r/dev" "$r/var"
chmod 1777 "$r/tmp"
cp "$busybox" "$r/bin/busybox"
for applet in $("$busybox" --list); do
  [[ "$applet" == busybox || -e "$r/bin/$applet" ]] || ln -s busybox "$r/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
make_image busybox bettercompute.local/busybox:v1 "$r" \
  '{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"]}'
echo "build-images.sh: wrote $out/pause.tar $out/busybox.tar" >&2
