package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/ociimage"
)

// imageArchiveCmd is `gpuslice image-archive`, hidden: the build tool
// scripts/images.sh runs to package gpuslice's container images (no
// Docker, no registry). It lives in the command tree rather than in a main
// of its own because a main only wires internal/cli (internal/lint), and
// the script builds this binary anyway.
func imageArchiveCmd(e *env) *cobra.Command {
	var (
		tags, files, dirs, symlinks, labels []string
		cfg                                 ociimage.Config
		platform                            string
		epoch                               int64
	)
	cmd := &cobra.Command{
		Use:    "image-archive ARCHIVE",
		Hidden: true,
		Short:  "Write a reproducible single-layer OCI image archive (for scripts/images.sh)",
		Long: `Write a single-layer container image as one tar: an OCI image layout
(for ctr images import, skopeo copy oci-archive:ARCHIVE) with a docker-style
manifest.json (docker load, crane push). The same flags and files give the
same bytes; every mtime is SOURCE_DATE_EPOCH (default 0).

  --file IMAGE_PATH=HOST_PATH   a host file (symlinks followed); mode 0755 if
                                the host file is executable by anyone, else 0644
  --dir IMAGE_PATH[=MODE]       a directory, mode in octal (default 0755)
  --symlink IMAGE_PATH=TARGET   a symbolic link
Parent directories are added with mode 0755.`,
		Example: `  gpuslice image-archive out/tool.tar --tag ghcr.io/example/tool:0.1.0 \
    --file /tool=./tool --dir /tmp=1777 --entrypoint /tool`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			img := ociimage.Image{Config: cfg, Tags: tags}
			if !cmd.Flags().Changed("source-date-epoch") {
				if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
					var err error
					if epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
						return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since the Unix epoch", s)
					}
				}
			}
			if epoch < 0 {
				return fmt.Errorf("--source-date-epoch %d: want seconds since the Unix epoch, 0 or more", epoch)
			}
			img.Created = time.Unix(epoch, 0).UTC()
			osArch := strings.Split(platform, "/")
			if len(osArch) < 2 || len(osArch) > 3 || osArch[0] == "" || osArch[1] == "" {
				return fmt.Errorf("--platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64", platform)
			}
			img.OS, img.Architecture = osArch[0], osArch[1]
			if len(osArch) == 3 {
				img.Variant = osArch[2]
			}
			for _, f := range files {
				dst, src, ok := strings.Cut(f, "=")
				if !ok || dst == "" || src == "" {
					return fmt.Errorf("--file %q: want IMAGE_PATH=HOST_PATH", f)
				}
				st, err := os.Stat(src)
				if err != nil {
					return fmt.Errorf("--file %q: %w", f, err)
				}
				mode := int64(0o644)
				if st.Mode().Perm()&0o111 != 0 {
					mode = 0o755
				}
				img.Entries = append(img.Entries, ociimage.Entry{Path: dst, Kind: ociimage.File, Mode: mode, Source: src})
			}
			for _, d := range dirs {
				dst, m, hasMode := strings.Cut(d, "=")
				mode := int64(0o755)
				if hasMode {
					v, err := strconv.ParseInt(m, 8, 64)
					if err != nil || v <= 0 || v > 0o7777 {
						return fmt.Errorf("--dir %q: mode %q: want octal permission bits such as 755 or 1777", d, m)
					}
					mode = v
				}
				img.Entries = append(img.Entries, ociimage.Entry{Path: dst, Kind: ociimage.Dir, Mode: mode})
			}
			for _, s := range symlinks {
				dst, target, ok := strings.Cut(s, "=")
				if !ok || dst == "" || target == "" {
					return fmt.Errorf("--symlink %q: want IMAGE_PATH=TARGET", s)
				}
				img.Entries = append(img.Entries, ociimage.Entry{Path: dst, Kind: ociimage.Symlink, Target: target})
			}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return fmt.Errorf("--label %q: want KEY=VALUE", l)
				}
				if img.Config.Labels == nil {
					img.Config.Labels = map[string]string{}
				}
				img.Config.Labels[k] = v
			}
			res, err := ociimage.WriteFile(args[0], img)
			if err != nil {
				return err
			}
			out := imageArchiveResult{Archive: args[0], Size: res.Size, Manifest: res.Manifest.String(),
				Config: res.Config.String(), Layer: res.Layer.String(), LayerSize: res.LayerSize, Tags: res.Tags}
			t := &table{header: []string{"ARCHIVE", "SIZE", "MANIFEST", "TAGS"}}
			t.add(out.Archive, fmt.Sprintf("%.1f MiB", float64(out.Size)/(1<<20)), out.Manifest, strings.Join(out.Tags, ","))
			return e.render(t, out)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&tags, "tag", nil, "the image's name, NAME:TAG such as ghcr.io/gpuslice/gpuslice:0.1.0 (repeatable; at least one)")
	f.StringArrayVar(&files, "file", nil, "IMAGE_PATH=HOST_PATH: a file copied from the host (repeatable)")
	f.StringArrayVar(&dirs, "dir", nil, "IMAGE_PATH[=MODE]: a directory, octal mode (default 755) (repeatable)")
	f.StringArrayVar(&symlinks, "symlink", nil, "IMAGE_PATH=TARGET: a symbolic link (repeatable)")
	f.StringArrayVar(&cfg.Entrypoint, "entrypoint", nil, "one argument of the entrypoint (repeat for each)")
	f.StringArrayVar(&cfg.Cmd, "cmd", nil, "one argument of the default command (repeat for each)")
	f.StringArrayVar(&cfg.Env, "env", nil, "KEY=VALUE in the image's environment (repeatable)")
	f.StringVar(&cfg.WorkingDir, "workdir", "", "the working directory")
	f.StringVar(&cfg.User, "user", "", "the user (uid[:gid] or a name in the image's /etc/passwd)")
	f.StringVar(&cfg.StopSignal, "stop-signal", "", "the signal that stops a container (default SIGTERM)")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE label, e.g. org.opencontainers.image.version=0.1.0 (repeatable)")
	f.StringVar(&platform, "platform", "linux/amd64", "OS/ARCH[/VARIANT] of the image")
	f.Int64Var(&epoch, "source-date-epoch", 0, "every mtime and the created time, in seconds (default $SOURCE_DATE_EPOCH, else 0)")
	return cmd
}

// imageArchiveResult is what image-archive prints with -o json|yaml.
type imageArchiveResult struct {
	Archive   string   `json:"archive"`
	Size      int64    `json:"size"`
	Manifest  string   `json:"manifest"`
	Config    string   `json:"config"`
	Layer     string   `json:"layer"`
	LayerSize int64    `json:"layerSize"`
	Tags      []string `json:"tags"`
}
