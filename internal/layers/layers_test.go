// Package layers_test checks that the module's imports point one way,
// down the layers ARCHITECTURE.md draws: a package imports packages of
// its own layer or below, never one above (which Go's ban on cycles
// alone does not prevent: store importing wan would compile). Every
// package must be placed in a layer, so that a new one is placed on
// purpose.
package layers_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "scistream/"

// layers lists the packages by layer, bottom first (paths under the
// module). A package may import its own layer's and those below.
var layers = [][]string{
	// Wire types, state, identity, system calls: what everything stands on.
	{"internal/api", "internal/version", "internal/secretfile", "internal/trustfile", "internal/bytesize", "internal/pace",
		"internal/ports", "internal/fileplan", "internal/proxyproto", "internal/sockio", "internal/udpsock", "internal/tcpcc", "internal/tcpbuf",
		"internal/egress", "internal/auth", "internal/certs", "internal/store", "internal/idp",
		"internal/waitfor", "internal/loopback", "internal/metricstest", "internal/leakcheck", "internal/handoff"},
	// The data-plane engines, the positioned frames of resumable legs
	// and the rates a stream carried.
	{"internal/sockmap", "internal/relay", "internal/rates", "internal/carry"},
	// WAN legs: TLS, TCP, the preface, every check of a peer.
	{"internal/wan"},
	// What a stream builds on: QUIC legs, pooled legs, strangers, the
	// dial of the peer's legs and of the application, the watch leg, ends.
	{"internal/wanquic", "internal/legpool", "internal/strangers", "internal/peerdial", "internal/appwait", "internal/framed",
		"internal/peerwatch", "internal/ends"},
	// A running stream.
	{"internal/stream"},
	// The gateway's concerns, composed by the gateway.
	{"internal/access", "internal/admission", "internal/intake", "internal/wanport", "internal/facility",
		"internal/observe", "internal/controlport", "internal/reqlog", "internal/httpapi", "internal/legacy12",
		"internal/gateway/config"},
	// The control server.
	{"internal/gateway"},
	// Clients, test rigs and experiments, which drive gateways.
	{"internal/cliflag", "internal/cliflag/cliflagtest", "internal/cfgfile", "internal/subcmd", "internal/client",
		"internal/login", "internal/localgw", "internal/localetcd", "internal/etcdtest", "internal/oidctest",
		"internal/netbed", "internal/bench", "internal/relay/relaytest", "internal/wan/wantest", "internal/exp/"},
	// The binaries.
	{"cmd/"},
}

// layerOf returns the layer of the package at path (a directory under
// the module root), or -1. An entry ending in "/" holds every package
// under it.
func layerOf(path string) int {
	for i, l := range layers {
		for _, p := range l {
			if path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
				return i
			}
		}
	}
	return -1
}

func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	checked := 0
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			imports, err := importsOf(path)
			if err != nil || imports == nil {
				return err // no package here
			}
			checked++
			own := layerOf(rel)
			if own < 0 {
				t.Errorf("%s is in no layer: place it in internal/layers/layers_test.go (and ARCHITECTURE.md's map)", rel)
				return nil
			}
			for _, imp := range imports {
				dep, ok := strings.CutPrefix(imp, module)
				if !ok {
					continue
				}
				if l := layerOf(dep); l > own {
					t.Errorf("%s (layer %d) imports %s (layer %d), a layer above it: dependencies point down", rel, own, dep, l)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 40 {
		t.Fatalf("checked %d packages: the walk missed the module", checked)
	}
}

// importsOf returns what the non-test Go files in dir import (nil if it
// has none: no package).
func importsOf(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	found := false
	for _, e := range entries {
		fn := e.Name()
		if e.IsDir() || !strings.HasSuffix(fn, ".go") || strings.HasSuffix(fn, "_test.go") {
			continue
		}
		found = true
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, fn), nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, is := range f.Imports {
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return nil, err
			}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	if found && out == nil {
		out = []string{}
	}
	return out, nil
}

// TestLayerOf: the check can fail: an import up a layer is caught.
func TestLayerOf(t *testing.T) {
	if layerOf("internal/store") >= layerOf("internal/wan") || layerOf("internal/gateway") <= layerOf("internal/stream") ||
		layerOf("internal/exp/conns") != layerOf("internal/bench") || layerOf("cmd/s2cs") <= layerOf("internal/gateway") || layerOf("internal/nosuch") != -1 {
		t.Fatal("layers out of order")
	}
}
