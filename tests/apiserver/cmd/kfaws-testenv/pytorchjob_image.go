package main

// Image pulling for the PyTorchJob runner: the container images of replicas
// come from the AWS emulator's local registry (the emulated ECR, a Docker
// Distribution `docker-registry` on loopback, see the emulator's
// registry.py), are fetched over the registry HTTP API v2 and unpacked once
// per manifest digest under DIR/images.

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Media types a manifest GET accepts (Docker v2 schema 2 first: that is what
// `kfaws image push` writes; OCI for images from elsewhere; lists and
// indexes resolve to the linux/<this architecture> entry).
const (
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
)

// ecrHost is the registry host of an ECR image reference,
// ACCOUNT.dkr.ecr.REGION.amazonaws.com (".com.cn" in the China partition).
var ecrHost = regexp.MustCompile(`^[0-9]{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`)

// repositoryName is the Distribution grammar for repository names (path
// components of lowercase alphanumerics separated by '.', '_', '__' or '-').
var repositoryName = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

var (
	tagPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// imageRef is a parsed image reference: HOST/NAME[:TAG|@sha256:HEX].
type imageRef struct {
	Host       string // ACCOUNT.dkr.ecr.REGION.amazonaws.com, or the registry's own host:port
	Repository string // NAME, as in /v2/NAME/manifests/REF
	Reference  string // the tag (default "latest") or the sha256:HEX digest
}

// parseImageRef splits an image reference of the emulated ECR
// (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]`) or of the
// local registry itself (`127.0.0.1:PORT/NAME...`, when registryHost is that
// host). Any other registry is an error: nothing else is reachable here.
func parseImageRef(ref, registryHost string) (imageRef, error) {
	slash := strings.IndexByte(ref, '/')
	if slash <= 0 {
		return imageRef{}, fmt.Errorf("image %q has no registry host; only images in the emulated ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]) can run locally", ref)
	}
	r := imageRef{Host: ref[:slash]}
	if !ecrHost.MatchString(r.Host) && (registryHost == "" || r.Host != registryHost) {
		return imageRef{}, fmt.Errorf("image %q is not in the emulated ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME[:TAG|@sha256:HEX]); no other registry is reachable from the local runner", ref)
	}
	rest := ref[slash+1:]
	switch {
	case strings.Contains(rest, "@"):
		at := strings.IndexByte(rest, '@')
		r.Repository, r.Reference = rest[:at], rest[at+1:]
		// NAME:TAG@DIGEST: the digest wins, as for docker pull.
		if c := strings.LastIndexByte(r.Repository, ':'); c >= 0 {
			r.Repository = r.Repository[:c]
		}
		if !digestPattern.MatchString(r.Reference) {
			return imageRef{}, fmt.Errorf("image %q: digest %q is not sha256:<64 lowercase hex digits>", ref, r.Reference)
		}
	case strings.LastIndexByte(rest, ':') > strings.LastIndexByte(rest, '/'):
		c := strings.LastIndexByte(rest, ':')
		r.Repository, r.Reference = rest[:c], rest[c+1:]
		if !tagPattern.MatchString(r.Reference) {
			return imageRef{}, fmt.Errorf("image %q: tag %q is not a valid tag", ref, r.Reference)
		}
	default:
		r.Repository, r.Reference = rest, "latest"
	}
	if !repositoryName.MatchString(r.Repository) {
		return imageRef{}, fmt.Errorf("image %q: repository name %q is not valid", ref, r.Repository)
	}
	return r, nil
}

// registryInfo is the emulator's answer to GET /ecr/registry.
type registryInfo struct {
	URL      string `json:"url"` // http://127.0.0.1:PORT
	Username string `json:"username"`
	Password string `json:"password"`
}

// imageConfig is the part of an image configuration the runner uses.
type imageConfig struct {
	Entrypoint []string `json:"Entrypoint"`
	Cmd        []string `json:"Cmd"`
	Env        []string `json:"Env"`
	WorkingDir string   `json:"WorkingDir"`
}

// pulledImage is an image unpacked on disk.
type pulledImage struct {
	Digest string // sha256:HEX of the manifest
	RootFS string // the unpacked layers
	Config imageConfig
}

// imageStore pulls and unpacks images once per manifest digest into dir.
type imageStore struct {
	dir    string
	client *http.Client
	mu     sync.Mutex
	locks  map[string]*sync.Mutex // per digest, serialising unpacking
}

func newImageStore(dir string) *imageStore {
	return &imageStore{dir: dir, client: &http.Client{Timeout: 10 * time.Minute}, locks: map[string]*sync.Mutex{}}
}

// registryGet GETs /v2/<name>/<kind>/<ref> with basic auth and accept.
func (s *imageStore) registryGet(reg registryInfo, name, kind, ref string, accept []string) (*http.Response, error) {
	u := strings.TrimRight(reg.URL, "/") + "/v2/" + name + "/" + kind + "/" + url.PathEscape(ref)
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if reg.Username != "" || reg.Password != "" {
		req.SetBasicAuth(reg.Username, reg.Password)
	}
	for _, a := range accept {
		req.Header.Add("Accept", a)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return resp, nil
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"` // lists and indexes
}

// fetchManifest returns the image manifest for ref and its digest,
// following a list or index to the linux/GOARCH entry.
func (s *imageStore) fetchManifest(reg registryInfo, ref imageRef) (manifest, string, error) {
	reference := ref.Reference
	for range 2 {
		resp, err := s.registryGet(reg, ref.Repository, "manifests", reference,
			[]string{mediaDockerManifest, mediaOCIManifest, mediaDockerList, mediaOCIIndex})
		if err != nil {
			return manifest{}, "", err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil {
			return manifest{}, "", err
		}
		sum := sha256.Sum256(body)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		if strings.HasPrefix(reference, "sha256:") && reference != digest {
			return manifest{}, "", fmt.Errorf("manifest %s@%s: content has digest %s", ref.Repository, reference, digest)
		}
		var m manifest
		if err := json.Unmarshal(body, &m); err != nil {
			return manifest{}, "", fmt.Errorf("manifest %s@%s: %w", ref.Repository, reference, err)
		}
		mt := m.MediaType
		if mt == "" {
			mt = resp.Header.Get("Content-Type")
		}
		switch {
		case mt == mediaDockerList || mt == mediaOCIIndex || (len(m.Manifests) > 0 && len(m.Layers) == 0):
			reference = ""
			for _, d := range m.Manifests {
				if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
					reference = d.Digest
					break
				}
			}
			if reference == "" {
				return manifest{}, "", fmt.Errorf("image %s:%s has no linux/%s manifest", ref.Repository, ref.Reference, runtime.GOARCH)
			}
			continue
		default:
			return m, digest, nil
		}
	}
	return manifest{}, "", fmt.Errorf("image %s:%s: a manifest list points to another list", ref.Repository, ref.Reference)
}

// pull returns the unpacked image, pulling it unless its digest is already
// unpacked.
func (s *imageStore) pull(reg registryInfo, ref imageRef) (*pulledImage, error) {
	m, digest, err := s.fetchManifest(reg, ref)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	l := s.locks[digest]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[digest] = l
	}
	s.mu.Unlock()
	l.Lock()
	defer l.Unlock()

	dest := filepath.Join(s.dir, strings.ReplaceAll(digest, ":", "-"))
	img := &pulledImage{Digest: digest, RootFS: filepath.Join(dest, "rootfs")}
	if cfg, err := os.ReadFile(filepath.Join(dest, "config.json")); err == nil {
		return img, json.Unmarshal(cfg, &img.Config)
	}
	tmp := dest + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "rootfs"), 0o755); err != nil {
		return nil, err
	}
	cfgBytes, err := s.blob(reg, ref.Repository, m.Config, func(r io.Reader) ([]byte, error) { return io.ReadAll(io.LimitReader(r, 16<<20)) })
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	var full struct {
		Config imageConfig `json:"config"`
	}
	if err := json.Unmarshal(cfgBytes, &full); err != nil {
		return nil, fmt.Errorf("image config %s: %w", m.Config.Digest, err)
	}
	for _, layer := range m.Layers {
		if _, err := s.blob(reg, ref.Repository, layer, func(r io.Reader) ([]byte, error) {
			return nil, unpackLayer(r, layer.MediaType, filepath.Join(tmp, "rootfs"))
		}); err != nil {
			return nil, fmt.Errorf("layer %s: %w", layer.Digest, err)
		}
	}
	cfg, _ := json.Marshal(full.Config)
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), cfg, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return nil, err
	}
	img.Config = full.Config
	return img, nil
}

// blob streams a blob through use, then checks its digest over all bytes.
func (s *imageStore) blob(reg registryInfo, name string, d descriptor, use func(io.Reader) ([]byte, error)) ([]byte, error) {
	if !digestPattern.MatchString(d.Digest) {
		return nil, fmt.Errorf("unsupported digest %q", d.Digest)
	}
	resp, err := s.registryGet(reg, name, "blobs", d.Digest, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := sha256.New()
	tee := io.TeeReader(resp.Body, h)
	out, err := use(tee)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d.Digest {
		return nil, fmt.Errorf("content has digest %s, not %s", got, d.Digest)
	}
	return out, nil
}

// unpackLayer extracts a (gzip) tar layer into root, applying OCI/AUFS
// whiteouts (.wh.NAME removes NAME, .wh..wh..opq empties the directory).
// Ownership is not kept (the runner is not root); modes are.
func unpackLayer(r io.Reader, mediaType, root string) error {
	if strings.HasSuffix(mediaType, "zstd") {
		return fmt.Errorf("zstd layers (%s) are not supported", mediaType)
	}
	if strings.Contains(mediaType, "gzip") || mediaType == "" {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + hdr.Name)
		if name == "/" {
			continue
		}
		target := filepath.Join(root, filepath.FromSlash(name))
		if err := noSymlinkParents(root, target); err != nil {
			return err
		}
		dir, base := filepath.Split(target)
		if base == ".wh..wh..opq" {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
			continue
		}
		if strings.HasPrefix(base, ".wh.") {
			os.RemoveAll(filepath.Join(dir, strings.TrimPrefix(base, ".wh.")))
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode) & os.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			if st, err := os.Lstat(target); err == nil && !st.IsDir() {
				os.RemoveAll(target)
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			os.Chmod(target, mode|0o700)
		case tar.TypeReg:
			os.RemoveAll(target)
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.RemoveAll(target)
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			src := filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Linkname)))
			os.RemoveAll(target)
			if err := os.Link(src, target); err != nil {
				return err
			}
		default:
			// Devices, FIFOs: a process on the host has no use for them.
		}
	}
}

// noSymlinkParents refuses to write through a symbolic link a previous
// entry created (which could point outside root).
func noSymlinkParents(root, target string) error {
	rel, err := filepath.Rel(root, filepath.Dir(target))
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("layer entry %s leaves the root", target)
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if err != nil {
			return nil // not created yet
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("layer entry %s is below the symbolic link %s", target, p)
		}
	}
	return nil
}

// resolveInRoot resolves p (an absolute path inside the image) to a host
// path under root, following symbolic links as if root were "/".
func resolveInRoot(root, p string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for links := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		if part == "" || part == "." {
			continue
		}
		next := path.Join(cur, part)
		st, err := os.Lstat(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", err
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return filepath.Join(root, filepath.FromSlash(cur)), nil
}

// findExecutable resolves a container command[0] inside the image: an
// absolute path as is, a bare name through the PATH of env (the image's
// and container's variables; Docker's default PATH if none).
func findExecutable(root, name string, env map[string]string) (string, error) {
	if strings.Contains(name, "/") {
		if !path.IsAbs(name) {
			return "", fmt.Errorf("command %q is relative to the working directory, which the local runner does not provide; use an absolute path", name)
		}
		p, err := resolveInRoot(root, name)
		if err != nil {
			return "", fmt.Errorf("executable %s not found in the image: %w", name, err)
		}
		return p, checkExecutable(p, name)
	}
	pathVar, ok := env["PATH"]
	if !ok {
		pathVar = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if !path.IsAbs(dir) {
			continue
		}
		p, err := resolveInRoot(root, path.Join(dir, name))
		if err == nil && checkExecutable(p, name) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in the image's PATH %s", name, pathVar)
}

func checkExecutable(p, name string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s in the image is not an executable file", name)
	}
	return nil
}
