package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// Do runs fn on an OS thread that has entered the network namespace ns
// (created by `ip netns add ns`). A socket stays in the namespace it was
// created in, so fn may create listeners and connections and hand them
// out; goroutines fn starts run elsewhere, in the process's namespace.
// fn runs on a fresh goroutine, so the caller's thread is never moved.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread unless the thread is back in its own
		// namespace: a locked thread that exits is destroyed, not reused.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join(netnsDir, ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET)
		target.Close()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w (needs root)", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave network namespace %s: %w", ns, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ip runs the ip command with args and returns its error with the
// command line and output, so a failed step says what it was.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// tc runs tc in namespace ns.
func tc(ctx context.Context, ns string, args ...string) error {
	full := append([]string{"-n", ns}, args...)
	out, err := exec.CommandContext(ctx, "tc", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc %s: %w: %s", strings.Join(full, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Sysctl writes value to the sysctl key (dotted, e.g.
// net.ipv4.ip_forward) inside namespace ns. The net.* keys written by
// this package are per namespace.
func Sysctl(ns, key, value string) error {
	return Do(ns, func() error {
		p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, ns, err)
		}
		return nil
	})
}

// ReadSysctl reads key inside namespace ns.
func ReadSysctl(ns, key string) (string, error) {
	var v string
	err := Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// nsExists reports whether the named namespace exists.
func nsExists(ns string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, ns))
	return err == nil
}

// Available reports why network namespaces cannot be built here, or
// nil if they can: it needs root, the ip and tc commands and
// /dev/net/tun, and creates and deletes a probe namespace.
func Available(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("not root: network namespaces, veth links and TUN devices need root (run as root, e.g. with sudo)")
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("no %s command: install iproute2 (apt-get install iproute2)", c)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("no /dev/net/tun: the kernel lacks TUN support (%v)", err)
	}
	probe := fmt.Sprintf("s2-probe-%d", os.Getpid())
	if err := ip(ctx, "netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace (in an unprivileged container?): %w", err)
	}
	if err := ip(ctx, "netns", "del", probe); err != nil {
		return err
	}
	return nil
}
