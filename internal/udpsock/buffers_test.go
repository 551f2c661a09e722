package udpsock

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func TestBufferWarning(t *testing.T) {
	if m := bufferWarning(2*BufferSize, BufferSize); m != "" {
		t.Fatalf("warning for large enough buffers: %q", m)
	}
	for _, c := range [][2]int{{208 << 10, 2 * BufferSize}, {2 * BufferSize, 208 << 10}} {
		m := bufferWarning(c[0], c[1])
		if !strings.Contains(m, "sysctl -w net.core.rmem_max=") || !strings.Contains(m, "wmem_max") {
			t.Fatalf("warning for rcv %d snd %d does not name the fix: %q", c[0], c[1], m)
		}
	}
}

// TestSetUDPBuffers: with the privilege to exceed the system limit (root
// on Linux) the buffers reach the size quic-go wants and nothing is
// logged; without it, either they do or the warning is logged.
func TestSetUDPBuffers(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs bytes.Buffer
	SetBuffers(c, slog.New(slog.NewTextHandler(&logs, nil)))
	raw, _ := c.SyscallConn()
	var rcv, snd int
	raw.Control(func(fd uintptr) {
		rcv, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		snd, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	big := rcv >= BufferSize && snd >= BufferSize
	if runtime.GOOS == "linux" && os.Geteuid() == 0 && !big {
		t.Fatalf("as root: buffers rcv %d snd %d, want >= %d", rcv, snd, BufferSize)
	}
	if big == strings.Contains(logs.String(), "smaller than QUIC needs") {
		t.Fatalf("buffers rcv %d snd %d, log %q: a warning must appear exactly when they are small", rcv, snd, logs.String())
	}
}
