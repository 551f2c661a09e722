package leakcheck

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// recorder is a testing.TB that keeps the errors a check reports and the
// cleanups it registers, so a test can run a check that must fail
// without failing itself. Everything else goes to the real test.
type recorder struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Cleanup(f func())  { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Failed() bool { return len(r.errors) > 0 }

// end runs the cleanups, last registered first, as the end of a test
// does, and returns what was reported.
func (r *recorder) end() string {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return strings.Join(r.errors, "\n")
}

// short is the check's bound where it is meant to fail: long enough to
// see it poll, short enough to keep the suite fast.
const short = 100 * time.Millisecond

// blockedLeaking is the function a left-behind goroutine runs, so its
// stack names it.
func blockedLeaking(release <-chan struct{}, ended chan<- struct{}) {
	<-release
	close(ended)
}

// leak starts a goroutine that runs until the test ends (it is released
// and waited for in a cleanup of the real test, so the real test's own
// check passes).
func leak(t *testing.T) {
	release, ended := make(chan struct{}), make(chan struct{})
	go blockedLeaking(release, ended)
	t.Cleanup(func() { close(release); <-ended })
}

// TestCheckPasses: what the test releases in its cleanups, including a
// goroutine that ends only after being told to and a socket, is not
// reported, though the goroutine ends after the check began.
func TestCheckPasses(t *testing.T) {
	Check(t)
	release := make(chan struct{})
	go func() { <-release }()
	t.Cleanup(func() { close(release) }) // the goroutine ends on its own time
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

func TestCheckFailsOnGoroutine(t *testing.T) {
	Check(t)
	r := &recorder{TB: t}
	check(r, short)
	leak(t)
	start := time.Now()
	got := r.end()
	if !strings.Contains(got, "1 goroutines") || !strings.Contains(got, "leakcheck.blockedLeaking") {
		t.Fatalf("a goroutine left running was reported as %q; want it counted with its stack", got)
	}
	if el := time.Since(start); el < short {
		t.Fatalf("reported after %s, before the %s it should wait", el, short)
	}
}

// A goroutine that was there before the test ends while the test leaves
// another: the count is unchanged, the new one is still reported.
func TestCheckFailsOnSwappedGoroutine(t *testing.T) {
	Check(t)
	oldRelease, oldEnded := make(chan struct{}), make(chan struct{})
	go func() { <-oldRelease; close(oldEnded) }()
	r := &recorder{TB: t}
	check(r, short)
	leak(t)
	close(oldRelease)
	<-oldEnded
	if got := r.end(); !strings.Contains(got, "leakcheck.blockedLeaking") {
		t.Fatalf("a goroutine left running in place of one that ended was reported as %q", got)
	}
}

func TestCheckFailsOnDescriptor(t *testing.T) {
	Check(t)
	r := &recorder{TB: t}
	check(r, short)
	f, err := os.CreateTemp(t.TempDir(), "left-open")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	got := r.end()
	for _, want := range []string{"3 descriptors", fmt.Sprintf("fd %d -> %s", f.Fd(), f.Name()), fmt.Sprintf("fd %d -> pipe:[", pr.Fd()), fmt.Sprintf("fd %d -> pipe:[", pw.Fd())} {
		if !strings.Contains(got, want) {
			t.Fatalf("a file and a pipe left open were reported as %q; want %q in it", got, want)
		}
	}
}

// A descriptor number closed and opened again for something else is a
// new descriptor.
func TestCheckFailsOnReusedDescriptor(t *testing.T) {
	Check(t)
	dir := t.TempDir()
	a, err := os.Create(dir + "/a")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	check(r, short)
	fd := a.Fd()
	a.Close()
	b, err := os.Create(dir + "/b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Fd() != fd {
		t.Skipf("the kernel gave descriptor %d, not the %d just closed", b.Fd(), fd)
	}
	if got := r.end(); !strings.Contains(got, fmt.Sprintf("fd %d -> %s", fd, b.Name())) {
		t.Fatalf("a reused descriptor was reported as %q", got)
	}
}

// A test that already failed is not checked.
func TestCheckSkipsFailedTest(t *testing.T) {
	Check(t)
	r := &recorder{TB: t}
	check(r, short)
	leak(t)
	r.Errorf("the test's own failure")
	if got := r.end(); got != "the test's own failure" {
		t.Fatalf("a failed test's check reported %q", got)
	}
}

// goroutinesLeft is Main's check.
func TestGoroutinesLeft(t *testing.T) {
	Check(t)
	before := goroutines()
	release, ended := make(chan struct{}), make(chan struct{})
	go blockedLeaking(release, ended)
	left := goroutinesLeft(before, short)
	if len(left) != 1 {
		t.Fatalf("%d goroutines left, want the 1 still running: %v", len(left), left)
	}
	for _, stack := range left {
		if !strings.Contains(stack, "leakcheck.blockedLeaking") {
			t.Fatalf("the goroutine left has the stack %q", stack)
		}
	}
	close(release)
	if left := goroutinesLeft(before, Timeout); len(left) != 0 {
		t.Fatalf("goroutines left after the last ended: %v", left)
	}
}

// tests stands for a package's tests in Main: Run runs f and returns code.
type tests struct {
	f    func()
	code int
}

func (ts tests) Run() int { ts.f(); return ts.code }

// Main fails a passing run whose tests left a goroutine running, saying
// which; runs its teardown first; leaves a failed run's code alone.
func TestMainCheck(t *testing.T) {
	Check(t)
	// Each run's tests leave a goroutine running, released at the end.
	leaking := func(code int) tests {
		return tests{func() { leak(t) }, code}
	}
	var out bytes.Buffer
	if code := run(leaking(3), nil, short, &out); code != 3 || out.Len() != 0 {
		t.Fatalf("a failed run: code %d, output %q; want 3 and nothing", code, out.String())
	}
	if code := run(leaking(0), nil, short, &out); code != 1 || !strings.Contains(out.String(), "leakcheck.blockedLeaking") {
		t.Fatalf("a passing run with a goroutine left: code %d, output %q; want 1 and its stack", code, out.String())
	}
	out.Reset()
	release, ended := make(chan struct{}), make(chan struct{})
	ts := tests{func() { go blockedLeaking(release, ended) }, 0}
	teardown := []func(){func() { close(release); <-ended }}
	if code := run(ts, teardown, short, &out); code != 0 || out.Len() != 0 {
		t.Fatalf("a passing run whose teardown ends the goroutine: code %d, output %q; want 0 and nothing", code, out.String())
	}
}

// TestForever: the goroutine os/signal keeps for the life of the process
// (started by the first signal.Notify, which go test -fuzz calls) is not
// a leak; any other goroutine is.
func TestForever(t *testing.T) {
	sig := "goroutine 5 [syscall]:\nos/signal.signal_recv()\n\t/usr/local/go/src/runtime/sigqueue.go:152 +0x98\nos/signal.loop()\n\t/usr/local/go/src/os/signal/signal_unix.go:23 +0x13"
	other := "goroutine 9 [chan receive]:\nexample.com/leaky.loop()\n\t/src/leaky.go:7 +0x1"
	if !forever(sig) || forever(other) {
		t.Fatalf("forever(os/signal loop) = %v, forever(another) = %v", forever(sig), forever(other))
	}
}
