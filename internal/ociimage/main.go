// Command ociimage writes airlock's container image without a container
// daemon: an OCI image layout (one image per platform, under one index) and
// a tarball of it, from binaries already built by scripts/release.sh. The
// image is the binary on an empty base, run as a non-root user, with /data
// its volume and working directory; the same binaries and date give the
// same bytes (docs/operations.md, "Release artifacts").
//
//	go run ./internal/ociimage --version v0.3.0 --date 2026-12-05T00:00:00Z \
//	    --binary linux/amd64=dist/airlock_v0.3.0_linux_amd64 --out dist/oci
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonRoot is the user the image runs as (distroless's "nonroot").
const nonRoot = 65532

// Options are one image build.
type Options struct {
	Version  string
	Revision string
	Created  time.Time
	// Binaries are airlock's binary per platform ("linux/amd64").
	Binaries map[string]string
	// CACerts is a CA bundle put at /etc/ssl/certs/ca-certificates.crt, so
	// that HTTPS upstreams and identity providers verify; "" for none.
	CACerts string
}

func main() {
	var bins multiFlag
	version := flag.String("version", "", "the version stamped in the binaries (an image label); required")
	revision := flag.String("revision", "", "the commit (an image label)")
	date := flag.String("date", "", "the image's creation time, RFC 3339 (the commit's time, for reproducible bytes); required")
	out := flag.String("out", "", "the OCI image layout directory to write (it must not exist); required")
	ca := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "a CA bundle to include; empty for none")
	flag.Var(&bins, "binary", "PLATFORM=PATH, such as linux/amd64=dist/airlock_linux_amd64; repeat per platform")
	flag.Parse()
	created, err := time.Parse(time.RFC3339, *date)
	if err != nil || *version == "" || *out == "" || len(bins) == 0 {
		fmt.Fprintln(os.Stderr, "ociimage: want --version, --date (RFC 3339), --out and at least one --binary PLATFORM=PATH")
		os.Exit(2)
	}
	opts := Options{Version: *version, Revision: *revision, Created: created, Binaries: map[string]string{}, CACerts: *ca}
	for _, b := range bins {
		platform, path, ok := strings.Cut(b, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "ociimage: --binary %q: want PLATFORM=PATH\n", b)
			os.Exit(2)
		}
		opts.Binaries[platform] = path
	}
	if err := Write(*out, opts); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// Name is the image's name where a runtime loads it: `podman load` and
// `docker load` tag it Name:VERSION, and skopeo takes VERSION as the
// reference in the archive (docs/operations.md, "Release artifacts").
const Name = "airlock"

// Write builds the index and writes it as an OCI image layout at dir. The
// layout's index.json holds one entry, the multi-platform index, named by
// the version: a runtime given the archive without a reference (skopeo
// copy, podman load, docker load) finds exactly one image and picks its own
// platform from it. Two unnamed entries make them refuse ("more than one
// image in oci, choose an image").
func Write(dir string, o Options) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; name a new directory", dir)
	}
	idx, err := Build(o)
	if err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		// OCI's name of the entry: the tag (skopeo's oci-archive:FILE:VERSION).
		"org.opencontainers.image.ref.name": o.Version,
		// containerd's and Docker's name of the image they load.
		"io.containerd.image.name": "docker.io/library/" + Name + ":" + o.Version,
	}))
}

// Build makes the image index: one image per platform, in platform order.
func Build(o Options) (v1.ImageIndex, error) {
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, p := range platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" {
			return nil, fmt.Errorf("platform %q: want linux/ARCH", p)
		}
		img, err := image(o, o.Binaries[p], arch)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: goos, Architecture: arch},
		}})
	}
	return idx, nil
}

func image(o Options, binary, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	files := []file{
		{name: "airlock", mode: 0o755, body: bin},
		{name: "data/", mode: 0o750, uid: nonRoot, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	if o.CACerts != "" {
		// Missing, the image would name a bundle it does not hold
		// (SSL_CERT_FILE) and no HTTPS upstream would verify: refused.
		ca, err := os.ReadFile(o.CACerts)
		if err != nil {
			return nil, fmt.Errorf("the CA bundle: %w (install ca-certificates, or --ca-certs \"\" for an image without one)", err)
		}
		files = append(files, file{name: "etc/", mode: 0o755, dir: true}, file{name: "etc/ssl/", mode: 0o755, dir: true},
			file{name: "etc/ssl/certs/", mode: 0o755, dir: true}, file{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: ca})
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: o.Created.UTC()}
	cf.Config.Entrypoint = []string{"/airlock"}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.User = fmt.Sprintf("%d:%d", nonRoot, nonRoot)
	cf.Config.WorkingDir = "/data"
	cf.Config.Env = []string{"TMPDIR=/tmp"}
	if o.CACerts != "" {
		cf.Config.Env = append(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	cf.Config.Volumes = map[string]struct{}{"/data": {}}
	cf.Config.ExposedPorts = map[string]struct{}{"8420/tcp": {}}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "airlock",
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   "https://github.com/airlockhq/airlock",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	cf.History = nil
	return mutate.ConfigFile(img, cf)
}

type file struct {
	name string
	mode int64
	uid  int
	dir  bool
	body []byte
}

// tarOf writes files as a layer: fixed times and owners, in the given
// order, so the same files give the same bytes.
func tarOf(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	for _, f := range files {
		h := &tar.Header{Name: filepath.ToSlash(f.name), Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: epoch, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
