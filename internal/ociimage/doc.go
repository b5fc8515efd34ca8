// Package ociimage writes reproducible single-layer container images as one
// tar archive that both kinds of image loaders accept: an OCI image layout
// (oci-layout, index.json, blobs/sha256/...) for `ctr images import`,
// `skopeo copy oci-archive:FILE` and friends, and beside it a docker-style
// manifest.json with RepoTags for `docker load` and `crane push`. The
// layout's index names every tag twice, as containerd and the OCI spec
// each expect: io.containerd.image.name carries the full normalized
// reference, org.opencontainers.image.ref.name its tag.
//
// The same Image always gives the same bytes: entries sorted by path,
// every mtime and the config's created time set to Image.Created (the
// Unix epoch when zero; callers pass SOURCE_DATE_EPOCH), uid and gid 0,
// gzip with no name and a zero header time, JSON from sorted structs. The
// gzip stream is compress/gzip's, so the bytes can change with the Go
// release that builds the writer, never between runs of one build.
//
// No Docker daemon, registry or image library is involved: the types come
// from github.com/opencontainers/image-spec, references are parsed and
// normalized by github.com/distribution/reference (what containerd and
// Docker use), and the archive is written with archive/tar and
// compress/gzip.
package ociimage
