#!/usr/bin/env bash
# Loads the release's image the ways docs/operations.md ("Release
# artifacts") tells an operator to, with Debian's skopeo and podman, and
# checks what each sees: one image per platform picked for this host, named
# airlock:VERSION, airlock serve as user 65532, and the binary inside
# reporting VERSION. It starts the container where the runtime can (not in
# a sandbox that refuses setrlimit; that is reported, not failed).
# Usage: scripts/check-image.sh DIST VERSION   (after scripts/release.sh)
set -euo pipefail
DIST=${1:?usage: scripts/check-image.sh DIST VERSION}
VERSION=${2:?usage: scripts/check-image.sh DIST VERSION}
archive="$DIST/airlock_${VERSION}_oci.tar"
host=$(go env GOARCH)
work=$(mktemp -d)
pod=(podman --root "$work/root" --runroot "$work/run" --storage-driver vfs)
# (podman's storage may still be settling: a second try, and a cleanup that
# fails does not fail the check.)
cleanup() { "${pod[@]}" image unmount --all >/dev/null 2>&1 || true; rm -rf "$work" 2>/dev/null || { sleep 1; rm -rf "$work" || true; }; }
trap cleanup EXIT
fail() { echo "check-image: $*" >&2; exit 1; }

# skopeo: no reference needed; every platform of the release is in it, and
# each platform's image holds the binary built for it (the ELF header's
# machine: 0x3e x86-64, 0xb7 AArch64).
declare -A machine=([amd64]=3e [arm64]=b7)
for arch in amd64 arm64; do
  [ -f "$DIST/airlock_${VERSION}_linux_${arch}" ] || continue
  got=$(skopeo inspect --override-arch "$arch" --format '{{.Architecture}} {{index .Labels "org.opencontainers.image.version"}}' "oci-archive:$archive")
  [ "$got" = "$arch $VERSION" ] || fail "skopeo inspect --override-arch $arch: $got"
  skopeo copy -q --override-arch "$arch" "oci-archive:$archive" "dir:$work/$arch"
  layer=$(sed -n 's/.*"layers":\[{[^}]*"digest":"sha256:\([0-9a-f]*\)".*/\1/p' "$work/$arch/manifest.json")
  [ -n "$layer" ] || fail "$arch: no layer in its manifest"
  mkdir -p "$work/$arch/root"
  tar -xf "$work/$arch/$layer" -C "$work/$arch/root" airlock
  got=$(od -An -tx1 -j18 -N1 "$work/$arch/root/airlock" | tr -d ' ')
  [ "$got" = "${machine[$arch]}" ] || fail "$arch: the image's binary is for ELF machine 0x$got, not $arch"
done
skopeo copy -q "oci-archive:$archive" "dir:$work/copy"
[ -f "$work/copy/manifest.json" ] || fail "skopeo copy wrote no manifest"
# The name the archive carries, as skopeo takes it.
skopeo inspect "oci-archive:$archive:$VERSION" >/dev/null

# podman load names it airlock:VERSION, for this host's platform.
loaded=$("${pod[@]}" load -q -i "$archive")
[[ "$loaded" == *"docker.io/library/airlock:$VERSION"* ]] || fail "podman load: $loaded"
got=$("${pod[@]}" image inspect "airlock:$VERSION" --format '{{.Architecture}}|{{join .Config.Entrypoint " "}}|{{join .Config.Cmd " "}}|{{.Config.User}}|{{.Config.WorkingDir}}')
[ "$got" = "$host|/airlock|serve|65532:65532|/data" ] || fail "podman image inspect: $got"
mnt=$("${pod[@]}" image mount "airlock:$VERSION")
"$mnt/airlock" version >"$work/version.txt"
head -1 "$work/version.txt" | grep -qxF "airlock $VERSION" || fail "the binary in the image says $(head -1 "$work/version.txt")"
"${pod[@]}" image unmount "airlock:$VERSION" >/dev/null
if out=$("${pod[@]}" run --rm --network none "airlock:$VERSION" version 2>&1); then
  head -1 <<<"$out" | grep -qxF "airlock $VERSION" || fail "podman run: $out"
  echo "check-image: podman ran the image"
else
  echo "check-image: podman could not start a container here ($out); loaded and inspected only"
fi
echo "check-image: $archive loads in skopeo and podman as airlock:$VERSION"
