package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// testImage is a small image with every kind of entry, one of them read
// from a host file.
func testImage(t *testing.T) Image {
	t.Helper()
	src := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return Image{
		Entries: []Entry{
			{Path: "/usr/bin/tool", Kind: File, Mode: 0o755, Source: src},
			{Path: "/etc/passwd", Kind: File, Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
			{Path: "/tmp", Kind: Dir, Mode: 0o1777},
			{Path: "bin/sh", Kind: Symlink, Target: "/usr/bin/tool"},
			{Path: "/empty", Kind: File},
		},
		Config: Config{
			Entrypoint: []string{"/usr/bin/tool"},
			Cmd:        []string{"--help"},
			Env:        []string{"PATH=/usr/bin:/bin"},
			WorkingDir: "/",
			User:       "0:0",
			Labels: map[string]string{
				"org.opencontainers.image.version": "0.1.0",
				"org.opencontainers.image.source":  "https://github.com/gpuslice/gpuslice",
			},
		},
		Tags:    []string{"ghcr.io/gpuslice/tool:0.1.0", "busybox:1"},
		Created: time.Unix(1700000000, 0),
	}
}

func write(t *testing.T, img Image) ([]byte, Result) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Write(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(buf.Len()) {
		t.Errorf("Result.Size = %d, wrote %d bytes", res.Size, buf.Len())
	}
	return buf.Bytes(), res
}

func TestSameInputsSameBytes(t *testing.T) {
	img := testImage(t)
	a, ra := write(t, img)
	b, rb := write(t, img)
	if !bytes.Equal(a, b) {
		t.Fatal("two archives of the same image differ")
	}
	if ra.Manifest != rb.Manifest {
		t.Fatalf("manifest digests differ: %s, %s", ra.Manifest, rb.Manifest)
	}
	// Entry order does not matter; the created time does.
	shuffled := img
	shuffled.Entries = slices.Clone(img.Entries)
	slices.Reverse(shuffled.Entries)
	if c, _ := write(t, shuffled); !bytes.Equal(a, c) {
		t.Error("reordering the entries changed the archive")
	}
	later := img
	later.Created = img.Created.Add(time.Second)
	if d, _ := write(t, later); bytes.Equal(a, d) {
		t.Error("a different created time gave the same archive")
	}
	// WriteFile writes the same bytes.
	name := filepath.Join(t.TempDir(), "img.tar")
	if _, err := WriteFile(name, img); err != nil {
		t.Fatal(err)
	}
	if f, err := os.ReadFile(name); err != nil || !bytes.Equal(a, f) {
		t.Errorf("WriteFile wrote different bytes (err %v)", err)
	}
}

// archive is a written archive read back.
type archive struct {
	names []string
	files map[string][]byte
	hdrs  map[string]*tar.Header
}

func readTar(t *testing.T, r io.Reader) archive {
	t.Helper()
	a := archive{files: map[string][]byte{}, hdrs: map[string]*tar.Header{}}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return a
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := a.hdrs[h.Name]; dup {
			t.Errorf("%s appears twice", h.Name)
		}
		a.names = append(a.names, h.Name)
		a.files[h.Name], a.hdrs[h.Name] = b, h
	}
}

func (a archive) json(t *testing.T, name string, v any) {
	t.Helper()
	b, ok := a.files[name]
	if !ok {
		t.Fatalf("%s missing; archive holds %v", name, a.names)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func (a archive) blob(t *testing.T, d ocispec.Descriptor) []byte {
	t.Helper()
	name := "blobs/sha256/" + d.Digest.Encoded()
	b, ok := a.files[name]
	if !ok {
		t.Fatalf("blob %s missing", name)
	}
	if digest.FromBytes(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s size %d, descriptor says %s %d", name, digest.FromBytes(b), len(b), d.Digest, d.Size)
	}
	return b
}

func TestArchiveIsAnOCILayoutAndADockerArchive(t *testing.T) {
	img := testImage(t)
	b, res := write(t, img)
	a := readTar(t, bytes.NewReader(b))
	want := []string{"oci-layout", "index.json", "manifest.json", "blobs/", "blobs/sha256/"}
	if !slices.Equal(a.names[:5], want) || len(a.names) != 8 {
		t.Errorf("archive entries %v, want %v then three blobs", a.names, want)
	}
	for _, name := range a.names {
		h := a.hdrs[name]
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(img.Created) {
			t.Errorf("%s: uid %d gid %d mtime %s", name, h.Uid, h.Gid, h.ModTime)
		}
	}

	var layout ocispec.ImageLayout
	a.json(t, "oci-layout", &layout)
	if layout.Version != ocispec.ImageLayoutVersion {
		t.Errorf("oci-layout version %q", layout.Version)
	}

	var index ocispec.Index
	a.json(t, "index.json", &index)
	if index.SchemaVersion != 2 || index.MediaType != ocispec.MediaTypeImageIndex || len(index.Manifests) != 2 {
		t.Fatalf("index.json: %+v", index)
	}
	wantNames := [][2]string{{"ghcr.io/gpuslice/tool:0.1.0", "0.1.0"}, {"docker.io/library/busybox:1", "1"}}
	for i, d := range index.Manifests {
		if d.Digest != res.Manifest || d.MediaType != ocispec.MediaTypeImageManifest {
			t.Errorf("index.json manifests[%d]: %s %s, want %s", i, d.MediaType, d.Digest, res.Manifest)
		}
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
			t.Errorf("index.json manifests[%d]: platform %+v", i, d.Platform)
		}
		if got := [2]string{d.Annotations[AnnotationImageName], d.Annotations[ocispec.AnnotationRefName]}; got != wantNames[i] {
			t.Errorf("index.json manifests[%d]: names %q, want %q", i, got, wantNames[i])
		}
	}
	if !slices.Equal(res.Tags, []string{wantNames[0][0], wantNames[1][0]}) {
		t.Errorf("Result.Tags %v", res.Tags)
	}

	var manifest ocispec.Manifest
	if err := json.Unmarshal(a.blob(t, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != ocispec.MediaTypeImageConfig || len(manifest.Layers) != 1 ||
		manifest.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip || manifest.MediaType != ocispec.MediaTypeImageManifest {
		t.Fatalf("manifest: %+v", manifest)
	}
	var config ocispec.Image
	if err := json.Unmarshal(a.blob(t, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if config.OS != "linux" || config.Architecture != "amd64" || !config.Created.Equal(img.Created) ||
		!slices.Equal(config.Config.Entrypoint, img.Config.Entrypoint) || !slices.Equal(config.Config.Cmd, img.Config.Cmd) ||
		!slices.Equal(config.Config.Env, img.Config.Env) || config.Config.User != "0:0" || config.Config.WorkingDir != "/" ||
		config.Config.Labels["org.opencontainers.image.version"] != "0.1.0" || len(config.History) != 1 {
		t.Errorf("config: %+v", config)
	}

	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	a.json(t, "manifest.json", &docker)
	if len(docker) != 1 || docker[0].Config != "blobs/sha256/"+manifest.Config.Digest.Encoded() ||
		!slices.Equal(docker[0].Layers, []string{"blobs/sha256/" + manifest.Layers[0].Digest.Encoded()}) ||
		!slices.Equal(docker[0].RepoTags, []string{"ghcr.io/gpuslice/tool:0.1.0", "busybox:1"}) {
		t.Errorf("manifest.json: %+v", docker)
	}

	// The layer: a fixed gzip header, the uncompressed digest is the
	// config's diff_id, entries sorted with their parents, owned by root.
	gz := a.blob(t, manifest.Layers[0])
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" || zr.Comment != "" || zr.OS != 255 {
		t.Errorf("gzip header: %+v", zr.Header)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest.FromBytes(raw) || res.DiffID != digest.FromBytes(raw) {
		t.Errorf("diff_ids %v, uncompressed layer %s", config.RootFS.DiffIDs, digest.FromBytes(raw))
	}
	layer := readTar(t, bytes.NewReader(raw))
	wantLayer := []string{"bin/", "bin/sh", "empty", "etc/", "etc/passwd", "tmp/", "usr/", "usr/bin/", "usr/bin/tool"}
	if !slices.Equal(layer.names, wantLayer) {
		t.Errorf("layer entries %v, want %v", layer.names, wantLayer)
	}
	modes := map[string]int64{"bin/": 0o755, "bin/sh": 0o777, "empty": 0o644, "etc/passwd": 0o644, "tmp/": 0o1777, "usr/bin/tool": 0o755}
	for name, mode := range modes {
		if h := layer.hdrs[name]; h == nil || h.Mode != mode {
			t.Errorf("layer %s: header %+v, want mode %#o", name, h, mode)
		}
	}
	for _, name := range layer.names {
		h := layer.hdrs[name]
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(img.Created) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("layer %s: uid %d gid %d mtime %s atime %s ctime %s", name, h.Uid, h.Gid, h.ModTime, h.AccessTime, h.ChangeTime)
		}
	}
	if h := layer.hdrs["bin/sh"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/bin/tool" {
		t.Errorf("bin/sh: %+v", h)
	}
	if got := string(layer.files["usr/bin/tool"]); got != "#!/bin/sh\necho hi\n" {
		t.Errorf("usr/bin/tool holds %q", got)
	}
}

func TestCreatedDefaultsToTheEpoch(t *testing.T) {
	img := testImage(t)
	img.Created = time.Time{}
	b, _ := write(t, img)
	a := readTar(t, bytes.NewReader(b))
	if h := a.hdrs["index.json"]; h.ModTime.Unix() != 0 {
		t.Errorf("index.json mtime %s, want the Unix epoch", h.ModTime)
	}
}

func TestInvalidInputNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Image)
		want []string
	}{
		{"duplicate path", func(img *Image) { img.Entries = append(img.Entries, Entry{Path: "etc//passwd/", Data: []byte("x")}) },
			[]string{`entries[5] (path "etc//passwd/"): duplicate of entries[1] (path "/etc/passwd")`}},
		{"escaping path", func(img *Image) { img.Entries = append(img.Entries, Entry{Path: "/etc/../../x"}) },
			[]string{`entries[5].path "/etc/../../x": has a ".." component`}},
		{"relative escape", func(img *Image) { img.Entries[0].Path = "../x" }, []string{`entries[0].path "../x"`}},
		{"root", func(img *Image) { img.Entries = append(img.Entries, Entry{Path: "/", Kind: Dir}) }, []string{`entries[5].path "/": is the image root`}},
		{"empty path", func(img *Image) { img.Entries[1].Path = "" }, []string{`entries[1].path "": empty`}},
		{"no tag", func(img *Image) { img.Tags = []string{"ghcr.io/gpuslice/gpuslice"} }, []string{`tags[0] "ghcr.io/gpuslice/gpuslice": no tag`}},
		{"bad tag", func(img *Image) { img.Tags[1] = "ghcr.io/GPUslice/x:1" }, []string{`tags[1] "ghcr.io/GPUslice/x:1"`, "NAME:TAG"}},
		{"digest", func(img *Image) { img.Tags[0] = "busybox@sha256:" + strings.Repeat("a", 64) }, []string{`tags[0] "busybox@sha256:`, "digest"}},
		{"same tag twice", func(img *Image) { img.Tags = []string{"busybox:1", "docker.io/library/busybox:1"} }, []string{`tags[1] "docker.io/library/busybox:1": the same image name as tags[0]`}},
		{"no tags", func(img *Image) { img.Tags = nil }, []string{"tags: none"}},
		{"symlink without target", func(img *Image) { img.Entries[3].Target = "" }, []string{`entries[3] (path "bin/sh").target: empty`}},
		{"file under a symlink", func(img *Image) { img.Entries = append(img.Entries, Entry{Path: "/bin/sh/x"}) },
			[]string{`entries[5] (path "/bin/sh/x"): its parent "/bin/sh" is a symlink`}},
		{"both data and source", func(img *Image) { img.Entries[0].Data = []byte("x") }, []string{`entries[0] (path "/usr/bin/tool"): both data and source`}},
		{"bad mode", func(img *Image) { img.Entries[2].Mode = 0o17777 }, []string{`entries[2] (path "/tmp").mode 017777`}},
		{"env", func(img *Image) { img.Config.Env = append(img.Config.Env, "NOEQUALS") }, []string{`config.env[1] "NOEQUALS": want KEY=VALUE`}},
		{"two problems", func(img *Image) { img.Tags[0] = "x"; img.Entries[1].Path = "" }, []string{`tags[0] "x": no tag`, `entries[1].path "": empty`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := testImage(t)
			tc.edit(&img)
			var buf bytes.Buffer
			_, err := Write(&buf, img)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if buf.Len() != 0 {
				t.Errorf("%d bytes written before the error", buf.Len())
			}
		})
	}
}

func TestMissingSourceLeavesNoFile(t *testing.T) {
	img := testImage(t)
	img.Entries[0].Source = filepath.Join(t.TempDir(), "absent")
	dir := t.TempDir()
	_, err := WriteFile(filepath.Join(dir, "img.tar"), img)
	if err == nil || !strings.Contains(err.Error(), `entry "/usr/bin/tool": source:`) {
		t.Fatalf("error %v, want one naming the entry and its source", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	img.Entries[0].Source = dir
	if _, err := Write(io.Discard, img); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as source: error %v", err)
	}
}
