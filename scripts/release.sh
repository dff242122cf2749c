#!/usr/bin/env bash
# Release artifacts, reproducibly (docs/operations.md, "Release artifacts"):
# static binaries for linux and darwin on amd64 and arm64 and windows/amd64,
# the version, commit and date stamped; SHA-256 checksums; a CycloneDX SBOM;
# an OCI image layout (linux/amd64 and linux/arm64) and a tarball of it,
# built without a container daemon. The same tree gives the same bytes: the
# date is the commit's, paths are trimmed, the build id is empty.
# Usage: scripts/release.sh VERSION [OUT]   (make release VERSION=v0.3.0)
set -euo pipefail
VERSION=${1:?usage: scripts/release.sh VERSION [OUT]}
OUT=${2:-dist}
case "$VERSION" in v[0-9]*) ;; *) echo "release: VERSION must look like v0.3.0, not $VERSION" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
# The prerequisites first, before minutes of building (README, "Release").
SBOM_TOOL=${SBOM_TOOL:-cyclonedx-gomod}
if ! command -v "$SBOM_TOOL" >/dev/null; then
  echo "release: $SBOM_TOOL not found; install it first: go install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0 (or set SBOM_TOOL)" >&2
  exit 2
fi
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
DATE=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  echo "release: the tree has uncommitted changes; the artifacts would not be what $COMMIT builds" >&2
  [ "${ALLOW_DIRTY:-}" = 1 ] || exit 1
fi
rm -rf "$OUT"; mkdir -p "$OUT"
LDFLAGS="-s -w -buildid= -X main.version=$VERSION -X main.commit=$COMMIT -X main.date=$DATE"
for target in ${TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64}; do
  os=${target%/*}; arch=${target#*/}; ext=""; [ "$os" = windows ] && ext=.exe
  name="airlock_${VERSION}_${os}_${arch}${ext}"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$OUT/$name" ./cmd/airlock
  echo "built $OUT/$name"
done
# The SBOM: every module the binary links, with versions and hashes.
GOFLAGS=-mod=mod "$SBOM_TOOL" app -json -noserial -notimestamp -main cmd/airlock -output "$OUT/airlock_${VERSION}.sbom.cdx.json" . >/dev/null
# It names airlock by git's version (a pseudo-version before the tag): the
# release's, as the binaries say it.
go run ./internal/sbomversion --version "$VERSION" "$OUT/airlock_${VERSION}.sbom.cdx.json"
echo "wrote $OUT/airlock_${VERSION}.sbom.cdx.json"
# The image: linux binaries on an empty base.
images=()
for arch in amd64 arm64; do
  f="$OUT/airlock_${VERSION}_linux_${arch}"
  [ -f "$f" ] && images+=(--binary "linux/$arch=$f")
done
if [ ${#images[@]} -gt 0 ]; then
  go run ./internal/ociimage --version "$VERSION" --revision "$COMMIT" --date "$DATE" --out "$OUT/oci" "${images[@]}"
  tar --sort=name --mtime="@0" --owner=0 --group=0 --numeric-owner -C "$OUT/oci" -cf "$OUT/airlock_${VERSION}_oci.tar" .
  echo "wrote $OUT/oci and $OUT/airlock_${VERSION}_oci.tar"
fi
(cd "$OUT" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
echo "wrote $OUT/SHA256SUMS"
