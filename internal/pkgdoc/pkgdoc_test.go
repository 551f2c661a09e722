// Package pkgdoc_test checks that every package of the module says what
// it provides: exactly one doc comment, which starts with its name, as
// tailscale's pkgdoc_test.go does. A package's doc is where a reader
// starts; two of them would disagree.
package pkgdoc_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPackageDocs(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (deploy/helmtest)
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		docs := map[string][]string{} // by package: the files with a doc comment
		for _, e := range entries {
			fn := e.Name()
			if e.IsDir() || !strings.HasSuffix(fn, ".go") || strings.HasSuffix(fn, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(path, fn), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			pname := f.Name.Name
			if _, ok := docs[pname]; !ok {
				docs[pname] = nil
			}
			if f.Doc != nil {
				docs[pname] = append(docs[pname], fn)
				if want := "Package " + pname; pname != "main" && !strings.HasPrefix(f.Doc.Text(), want+" ") {
					t.Errorf("%s: the doc comment of %s does not start with %q", rel(root, path), fn, want)
				}
			}
		}
		for pname, files := range docs {
			seen++
			if len(files) != 1 {
				t.Errorf("%s: package %s has %d doc comments (%s), want exactly one", rel(root, path), pname, len(files), strings.Join(files, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 30 {
		t.Fatalf("checked %d packages: the walk missed the module", seen)
	}
	t.Logf("%d packages, one doc comment each", seen)
}

func rel(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}
