package ociimage

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
)

// Kind is what an Entry puts in the image.
type Kind int

const (
	// File is a regular file with Data or the contents of Source.
	File Kind = iota
	// Dir is a directory.
	Dir
	// Symlink is a symbolic link to Target.
	Symlink
)

func (k Kind) String() string {
	switch k {
	case File:
		return "file"
	case Dir:
		return "dir"
	case Symlink:
		return "symlink"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Entry is one file system object of the image's layer.
type Entry struct {
	// Path is where the entry lives in the image, such as "/gpuslice" or
	// "etc/passwd"; it is cleaned and must stay inside the image root.
	// Parent directories that no entry names are added with mode 0755.
	Path string
	Kind Kind
	// Mode is the permission bits with setuid, setgid and sticky as tar
	// writes them (0o1777 for /tmp). Zero means 0644 for a file, 0755 for
	// a directory and 0777 for a symlink.
	Mode int64
	// Data is a file's contents, unless Source is set.
	Data []byte
	// Source is a host file whose contents the file gets (symlinks are
	// followed; it must be a regular file).
	Source string
	// Target is a symlink's target, relative or absolute as it should
	// read inside the image.
	Target string
}

// Config is the image's run configuration (the OCI image config's
// "config" object).
type Config struct {
	Entrypoint []string
	Cmd        []string
	// Env is KEY=VALUE pairs.
	Env        []string
	WorkingDir string
	User       string
	// Labels such as org.opencontainers.image.version and .source.
	Labels     map[string]string
	StopSignal string
}

// Image is everything one archive holds.
type Image struct {
	Entries []Entry
	Config  Config
	// OS and Architecture of the image; empty means linux and amd64.
	OS, Architecture, Variant string
	// Tags are full references with a tag, such as
	// "ghcr.io/gpuslice/gpuslice:0.1.0"; a name without a registry is
	// Docker Hub's ("busybox:1" is docker.io/library/busybox:1), as
	// containerd and Docker read it.
	Tags []string
	// Created is the config's created time and every entry's mtime
	// (whole seconds); zero means the Unix epoch.
	Created time.Time
}

// tag is one parsed entry of Image.Tags.
type tag struct {
	full     string // docker.io/library/busybox:1 — io.containerd.image.name
	familiar string // busybox:1 — manifest.json's RepoTags
	tag      string // 1 — org.opencontainers.image.ref.name
}

func parseTag(s string) (tag, error) {
	if s == "" {
		return tag{}, errors.New("empty (want NAME:TAG, e.g. ghcr.io/gpuslice/gpuslice:0.1.0)")
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return tag{}, fmt.Errorf("%w (want NAME:TAG, e.g. ghcr.io/gpuslice/gpuslice:0.1.0)", err)
	}
	if _, ok := named.(reference.Digested); ok {
		return tag{}, errors.New("a digest cannot name an image being built (want NAME:TAG)")
	}
	tagged, ok := named.(reference.NamedTagged)
	if !ok {
		return tag{}, fmt.Errorf("no tag (want NAME:TAG, e.g. %s:0.1.0)", s)
	}
	return tag{full: tagged.String(), familiar: reference.FamiliarString(tagged), tag: tagged.Tag()}, nil
}

// cleanPath returns p as a layer path ("etc/passwd", no leading slash)
// or why it cannot be one.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("contains a NUL byte")
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", errors.New(`has a ".." component; a path in the image stays inside its root`)
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "", errors.New("is the image root itself")
	}
	return rel, nil
}

// normalized is a validated Image: entries cleaned, defaulted, sorted,
// with their parents; tags parsed.
type normalized struct {
	entries []Entry // Path relative, no leading slash; sorted
	tags    []tag
	created time.Time
	os      string
	arch    string
	variant string
}

// validate checks img and returns it normalized, or every problem found,
// each naming its field.
func validate(img Image) (normalized, error) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	n := normalized{os: img.OS, arch: img.Architecture, variant: img.Variant}
	if n.os == "" {
		n.os = "linux"
	}
	if n.arch == "" {
		n.arch = "amd64"
	}
	n.created = img.Created.UTC().Truncate(time.Second)
	if img.Created.IsZero() {
		n.created = time.Unix(0, 0).UTC()
	}
	if n.created.Before(time.Unix(0, 0)) {
		fail("created %s: before the Unix epoch", img.Created.Format(time.RFC3339))
	}

	seen := map[string]int{}
	for i, e := range img.Entries {
		field := fmt.Sprintf("entries[%d]", i)
		rel, err := cleanPath(e.Path)
		if err != nil {
			fail("%s.path %q: %v", field, e.Path, err)
			continue
		}
		field = fmt.Sprintf("entries[%d] (path %q)", i, e.Path)
		if j, dup := seen[rel]; dup {
			fail("%s: duplicate of entries[%d] (path %q)", field, j, img.Entries[j].Path)
			continue
		}
		seen[rel] = i
		if e.Mode < 0 || e.Mode > 0o7777 {
			fail("%s.mode %#o: want permission bits with setuid/setgid/sticky only (0 to 07777)", field, e.Mode)
		}
		switch e.Kind {
		case File:
			if e.Source != "" && e.Data != nil {
				fail("%s: both data and source are set; a file takes one", field)
			}
			if e.Mode == 0 {
				e.Mode = 0o644
			}
		case Dir:
			if e.Source != "" || e.Data != nil || e.Target != "" {
				fail("%s: a directory takes no data, source or target", field)
			}
			if e.Mode == 0 {
				e.Mode = 0o755
			}
		case Symlink:
			if e.Target == "" {
				fail("%s.target: empty; a symlink needs a target", field)
			}
			if e.Source != "" || e.Data != nil {
				fail("%s: a symlink takes a target, not data or source", field)
			}
			if e.Mode == 0 {
				e.Mode = 0o777
			}
		default:
			fail("%s.kind %v: want file, dir or symlink", field, e.Kind)
		}
		if e.Kind != Symlink && e.Target != "" {
			fail("%s.target %q: only a symlink has a target", field, e.Target)
		}
		e.Path = rel
		n.entries = append(n.entries, e)
	}
	// A parent must be a directory: named as one, or added here.
	byPath := map[string]Entry{}
	for _, e := range n.entries {
		byPath[e.Path] = e
	}
	for _, e := range n.entries {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			p, ok := byPath[dir]
			if !ok {
				byPath[dir] = Entry{Path: dir, Kind: Dir, Mode: 0o755}
				continue
			}
			if p.Kind != Dir {
				fail("entries[%d] (path %q): its parent %q is a %v, not a directory", seen[e.Path], img.Entries[seen[e.Path]].Path, "/"+dir, p.Kind)
			}
		}
	}
	n.entries = n.entries[:0]
	for _, e := range byPath {
		n.entries = append(n.entries, e)
	}
	slices.SortFunc(n.entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })

	if len(img.Tags) == 0 {
		fail("tags: none; an image needs at least one NAME:TAG")
	}
	tags := map[string]int{}
	for i, s := range img.Tags {
		t, err := parseTag(s)
		if err != nil {
			fail("tags[%d] %q: %v", i, s, err)
			continue
		}
		if j, dup := tags[t.full]; dup {
			fail("tags[%d] %q: the same image name as tags[%d] %q (%s)", i, s, j, img.Tags[j], t.full)
			continue
		}
		tags[t.full] = i
		n.tags = append(n.tags, t)
	}

	c := img.Config
	for i, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			fail("config.env[%d] %q: want KEY=VALUE", i, kv)
		}
	}
	for k := range c.Labels {
		if k == "" {
			fail("config.labels: an empty key")
		}
	}
	return n, errors.Join(errs...)
}
