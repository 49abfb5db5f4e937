package mcpfleet_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs checks that every package of the module has a doc comment, and that it starts the way
// `go doc` expects: "Package NAME " for a library, "Command NAME " for a main package (named for its folder).
func TestPackageDocs(t *testing.T) {
	if missing := undocumentedPackages(t, "."); len(missing) > 0 {
		t.Fatalf("packages without a proper doc comment:\n  %s", strings.Join(missing, "\n  "))
	}
}

// TestPackageDocsFindsAMissingOne proves the check fires: a package without a doc comment, and one whose
// comment names another package, are both reported.
func TestPackageDocsFindsAMissingOne(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good/a.go", "// Package good does one thing.\npackage good\n")
	write("good/a_test.go", "package good\n")
	write("bare/a.go", "package bare\n")
	write("bare/b_test.go", "// Package bare is documented only in a test file, which go doc does not read.\npackage bare\n")
	write("wrong/a.go", "// Package other is a copied comment.\npackage wrong\n")
	write("cmd/tool/main.go", "// Command tool runs.\npackage main\n")
	write("cmd/bad/main.go", "// Runs things.\npackage main\n")
	write("testdata/x/a.go", "package x\n")
	write("other/go.mod", "module other\n")
	write("other/a.go", "package other\n")

	got := undocumentedPackages(t, root)
	want := []string{"bare", "cmd/bad", "wrong"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("reported %v, want %v", got, want)
	}
}

// undocumentedPackages lists, in walk order, the folders under root (relative to it) whose package has no
// doc comment of the expected form. Hidden folders, testdata and nested modules are skipped.
func undocumentedPackages(t *testing.T, root string) []string {
	t.Helper()
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root {
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		ok, found, err := packageDocumented(path)
		if err != nil {
			return err
		}
		if found && !ok {
			rel, _ := filepath.Rel(root, path)
			missing = append(missing, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return missing
}

// packageDocumented parses the package clauses of dir's non-test Go files. found reports whether there are
// any; ok whether one of them carries a doc comment of the expected form.
func packageDocumented(dir string) (ok, found bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, false, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return false, false, err
		}
		found = true
		if f.Doc == nil {
			continue
		}
		prefix := "Package " + f.Name.Name + " "
		if f.Name.Name == "main" {
			prefix = "Command " + filepath.Base(dir) + " "
		}
		if strings.HasPrefix(f.Doc.Text(), prefix) {
			return true, true, nil
		}
	}
	return false, found, nil
}
