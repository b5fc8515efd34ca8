package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImageArchive(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := func(archive string, extra ...string) []string {
		return append([]string{"image-archive", archive, "--tag", "ghcr.io/gpuslice/tool:0.1.0", "--file", "/tool=" + tool,
			"--dir", "/tmp=1777", "--symlink", "/bin/tool=../tool", "--entrypoint", "/tool", "--env", "PATH=/bin",
			"--label", "org.opencontainers.image.version=0.1.0"}, extra...)
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if out := run(args(a)...); strings.Contains(out, "error:") || !strings.Contains(out, "ghcr.io/gpuslice/tool:0.1.0") {
		t.Fatalf("unexpected output:\n%s", out)
	}
	// The flag and the environment variable say the same time: the same bytes.
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if out := run(args(b, "--source-date-epoch", "1700000000", "-o", "json")...); !strings.Contains(out, `"manifest": "sha256:`) {
		t.Fatalf("unexpected output:\n%s", out)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Errorf("two runs with the same inputs wrote different archives (%d and %d bytes)", len(ab), len(bb))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", "/run=999"}, `--dir "/run=999": mode "999": want octal`},
		{[]string{"--file", "/x"}, `--file "/x": want IMAGE_PATH=HOST_PATH`},
		{[]string{"--file", "/x=" + filepath.Join(dir, "absent")}, `--file "/x=`},
		{[]string{"--symlink", "/bin/sh"}, `--symlink "/bin/sh": want IMAGE_PATH=TARGET`},
		{[]string{"--label", "=x"}, `--label "=x": want KEY=VALUE`},
		{[]string{"--platform", "linux"}, `--platform "linux": want OS/ARCH`},
		{[]string{"--tag", "Bad:1"}, `tags[1] "Bad:1"`},
		{[]string{"--file", "/tool=" + tool}, `duplicate of entries[0] (path "/tool")`},
	} {
		out := run(args(filepath.Join(dir, "c.tar"), tc.args...)...)
		if !strings.Contains(out, "error: ") || !strings.Contains(out, tc.want) {
			t.Errorf("%v: output does not say %q:\n%s", tc.args, tc.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "c.tar")); !os.IsNotExist(err) {
		t.Errorf("a refused archive was written (stat: %v)", err)
	}
}
