// Package leakcheck fails tests that leave goroutines or open file
// descriptors behind: Check around one test (goroutines and
// descriptors), Main around a package's whole run, in its TestMain
// (goroutines).
//
// Both compare with a snapshot taken before. A goroutine is left behind
// if it runs after the test and did not run before it: goroutines are
// told apart by the IDs runtime.Stack prints, so one that ended cannot
// hide a new one, as a bare count would. A descriptor is left behind if
// /proc/self/fd lists it after the test and not before it, or with
// another target (a reused number). Ending takes a moment (a relay's
// goroutines return once its sockets close; Go releases a descriptor
// only when the last call on it returns), so both poll, for at most
// Timeout, before they fail; a failure shows what was left: every such
// goroutine's stack, every such descriptor's target.
//
// Check cannot tell a test's goroutines and sockets from those of tests
// running beside it (t.Parallel): use it only in tests that do not.
package leakcheck

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"scistream/internal/waitfor"
)

// Timeout is how long Check and Main wait for the goroutines and
// descriptors a test started to end before they report them.
const Timeout = 10 * time.Second

// Check snapshots the process's goroutines and descriptors now and, when
// the test ends, fails tb if any started since are still there after
// Timeout. The check runs as a cleanup of tb; cleanups run last first, so
// call Check first in the test: then every resource the test registers
// with tb.Cleanup is released before the check. A test that already
// failed is not checked (stopping midway, it may rightly leave things
// behind). On a system without /proc/self/fd only goroutines are
// checked.
func Check(tb testing.TB) {
	tb.Helper()
	check(tb, Timeout)
}

func check(tb testing.TB, within time.Duration) {
	tb.Helper()
	goBefore := goroutines()
	fdBefore, err := descriptors()
	if err != nil {
		tb.Logf("leakcheck: descriptors are not checked: %v", err)
	}
	tb.Cleanup(func() {
		tb.Helper()
		if tb.Failed() {
			return
		}
		var goLeft map[int]string
		var fdLeft map[int]string
		waitfor.Cond(within, func() bool {
			goLeft = started(goBefore, goroutines())
			if fdBefore != nil {
				now, err := descriptors()
				if err != nil {
					tb.Errorf("leakcheck: %v", err)
					fdBefore = nil
				}
				fdLeft = added(fdBefore, now)
			}
			return len(goLeft) == 0 && len(fdLeft) == 0
		})
		if len(goLeft) > 0 {
			tb.Errorf("leakcheck: %s after the test, %d goroutines it started still run:\n\n%s", within, len(goLeft), join(goLeft, "\n\n"))
		}
		if len(fdLeft) > 0 {
			lines := make(map[int]string, len(fdLeft))
			for fd, target := range fdLeft {
				lines[fd] = fmt.Sprintf("fd %d -> %s", fd, target)
			}
			tb.Errorf("leakcheck: %s after the test, %d descriptors it opened are still open:\n%s", within, len(fdLeft), join(lines, "\n"))
		}
	})
}

// Main is a package's TestMain: it runs the tests, then each teardown in
// order (closing what TestMain set up for all of them), then, if every
// test passed, waits at most Timeout for the goroutines started since
// Main was called to end. If some still run, it prints their stacks and
// the run fails. Main does not return: it calls os.Exit.
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
func Main(m *testing.M, teardown ...func()) {
	os.Exit(run(m, teardown, Timeout, os.Stderr))
}

// run is Main up to the exit, returning the code.
func run(m interface{ Run() int }, teardown []func(), within time.Duration, stderr io.Writer) int {
	before := goroutines()
	code := m.Run()
	for _, f := range teardown {
		f()
	}
	if code != 0 {
		return code
	}
	if left := goroutinesLeft(before, within); len(left) > 0 {
		fmt.Fprintf(stderr, "leakcheck: %s after the tests ended, %d goroutines they started still run:\n\n%s\n", within, len(left), join(left, "\n\n"))
		return 1
	}
	return 0
}

// goroutinesLeft waits up to within for every goroutine not in before to
// end, and returns those that did not.
func goroutinesLeft(before map[int]string, within time.Duration) map[int]string {
	var left map[int]string
	waitfor.Cond(within, func() bool {
		left = started(before, goroutines())
		return len(left) == 0
	})
	return left
}

// goroutines returns the stack of every goroutine, by goroutine ID.
func goroutines() map[int]string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := make(map[int]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		// Each starts "goroutine 42 [chan receive]:".
		id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		if n, err := strconv.Atoi(id); err == nil && !forever(g) {
			stacks[n] = g
		}
	}
	return stacks
}

// forever reports a goroutine that the standard library starts once and
// keeps for the life of the process by design, so it outlives any test
// that happened to start it: os/signal's loop, which the first
// signal.Notify starts (go test -fuzz calls it).
func forever(stack string) bool {
	return strings.Contains(stack, "\nos/signal.loop()")
}

// descriptors returns the process's open file descriptors and what each
// refers to ("socket:[1234]", "pipe:[5678]", a path), leaving out the
// one it reads the list through.
func descriptors() (map[int]string, error) {
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list descriptors: %w", err)
	}
	own := int(dir.Fd())
	fds := make(map[int]string, len(names))
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd == own {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + name)
		if err != nil {
			continue // closed since the listing
		}
		fds[fd] = target
	}
	return fds, nil
}

// started returns the goroutines of now whose IDs before lacks.
func started(before, now map[int]string) map[int]string {
	out := make(map[int]string)
	for id, stack := range now {
		if _, ok := before[id]; !ok {
			out[id] = stack
		}
	}
	return out
}

// added returns the descriptors of now that before lacks or holds with
// another target (the number was closed and reused).
func added(before, now map[int]string) map[int]string {
	out := make(map[int]string)
	for k, v := range now {
		if old, ok := before[k]; !ok || old != v {
			out[k] = v
		}
	}
	return out
}

// join returns m's values in key order, separated by sep.
func join(m map[int]string, sep string) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = m[k]
	}
	return strings.Join(vals, sep)
}
