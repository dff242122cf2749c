package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestImage builds airlock for this machine, puts it in an image, and
// checks what a runtime would see: the config runs airlock serve as a
// non-root user with /data its volume, the same inputs give the same
// digest, and the binary inside reports the version stamped in it. (No
// container runtime runs here; docs/operations.md says what was run.)
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds airlock")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.9.9", "-o", bin, "../../cmd/airlock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	arch := goarch(t)
	opts := Options{Version: "v9.9.9", Revision: "abc", Created: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
		Binaries: map[string]string{"linux/" + arch: bin}}
	first, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	if d1 != d2 {
		t.Fatalf("the same inputs gave two images: %s and %s", d1, d2)
	}
	out := filepath.Join(dir, "oci")
	if err := Write(out, opts); err != nil {
		t.Fatal(err)
	}
	if err := Write(out, opts); err == nil {
		t.Fatal("Write over an existing layout succeeded")
	}
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	// The layout's index holds one entry, the image index, named by the
	// version: runtimes given no reference refuse two unnamed entries.
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("layout index: %+v %v", m, err)
	}
	if a := m.Manifests[0].Annotations; a["org.opencontainers.image.ref.name"] != "v9.9.9" || a["io.containerd.image.name"] != "docker.io/library/airlock:v9.9.9" {
		t.Fatalf("layout index entry names: %v", a)
	}
	inner, err := idx.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatalf("the layout's entry is not an image index: %v", err)
	}
	im, err := inner.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != arch {
		t.Fatalf("image index: %+v %v", im, err)
	}
	img, err := inner.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/airlock" || strings.Join(c.Cmd, " ") != "serve" || c.User != "65532:65532" || c.WorkingDir != "/data" {
		t.Fatalf("config: entrypoint %v cmd %v user %q workdir %q", c.Entrypoint, c.Cmd, c.User, c.WorkingDir)
	}
	if _, ok := c.Volumes["/data"]; !ok || c.Labels["org.opencontainers.image.version"] != "v9.9.9" {
		t.Fatalf("config: volumes %v labels %v", c.Volumes, c.Labels)
	}
	inside := extract(t, img, dir)
	got, err := exec.Command(inside, "version").Output()
	if err != nil || !strings.HasPrefix(string(got), "airlock v9.9.9\n") {
		t.Fatalf("the binary in the image says %q (%v)", got, err)
	}
}

func goarch(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// extract copies /airlock out of the image's layer, checking /data is the
// non-root user's.
func extract(t *testing.T, img v1.Image, dir string) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	path, dataOwned := "", false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "data/":
			dataOwned = h.Uid == nonRoot
		case "airlock":
			path = filepath.Join(dir, "airlock-from-image")
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	if path == "" || !dataOwned {
		t.Fatalf("the layer: airlock at %q, /data owned by the non-root user %v", path, dataOwned)
	}
	return path
}
