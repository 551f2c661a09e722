package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"scistream/internal/leakcheck"
)

// bins holds the binaries TestMain builds once: static (CGO_ENABLED=0),
// as scripts/image.sh builds them for the image.
var bins struct{ dir, s2cs, s2uc string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scistream-deploy-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.s2cs = filepath.Join(dir, "s2cs")
	bins.s2uc = filepath.Join(dir, "s2uc")
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "scistream/cmd/s2cs", "scistream/cmd/s2uc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	leakcheck.Main(m, func() { os.RemoveAll(dir) })
}
