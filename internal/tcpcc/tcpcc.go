// Package tcpcc chooses and sets the congestion control of the
// gateways' TCP WAN legs (TCP_CONGESTION, per socket): a facility's
// hosts run their distribution's default (cubic on RHEL and Debian),
// which gives up most of a long, lossy path, and the gateways own both
// ends of their WAN legs, so they can run what suits the WAN (BBR)
// without touching the host's setting or the LAN legs, which keep it.
//
// A name is usable when this process can set it on a socket: the
// kernel offers it (tcp_available_congestion_control, a module loaded)
// and either it is in tcp_allowed_congestion_control or the process
// has CAP_NET_ADMIN. Resolve finds out by setting it on a socket of its
// own, so what it says is what the legs will get.
package tcpcc

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Choices of Resolve besides a congestion control's name.
const (
	// Auto is BBR where it can be set, else the host's default.
	Auto = "auto"
	// Host leaves the host's default on every leg.
	Host = "host"
)

// Preferred is what Auto picks where it can.
const Preferred = "bbr"

// A Choice is what Resolve decided: Name is set on every WAN leg ("":
// none, the host's default, HostDefault); Note says why, for the start
// line; FellBack says Auto could not have Preferred (Note says why and
// the fix), worth a warning.
type Choice struct {
	Name        string
	HostDefault string
	Note        string
	FellBack    bool
}

// Effective is the congestion control the legs run: Name, or the host's.
func (c Choice) Effective() string {
	if c.Name != "" {
		return c.Name
	}
	return c.HostDefault
}

// maxName is the kernel's TCP_CA_NAME_MAX less its NUL.
const maxName = 15

// Resolve returns the choice of want: Auto, Host or a congestion
// control's name, which must be usable (else an error naming the fix).
func Resolve(want string) (Choice, error) {
	c := Choice{HostDefault: readProc("tcp_congestion_control")}
	switch want {
	case Host:
		c.Note = "the host's default"
		return c, nil
	case Auto, "":
		if err := Probe(Preferred); err != nil {
			c.Note = fmt.Sprintf("the host's default (%s cannot be set here: %v)", Preferred, err)
			c.FellBack = true
			return c, nil
		}
		c.Name, c.Note = Preferred, "auto: "+Preferred+" where the kernel offers it"
		return c, nil
	}
	if err := Valid(want); err != nil {
		return c, err
	}
	if err := Probe(want); err != nil {
		return c, err
	}
	c.Name, c.Note = want, "as asked"
	return c, nil
}

// Valid checks the form of a congestion control's name.
func Valid(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("congestion control %q: give a name of 1 to %d characters (auto, host, or one of tcp_available_congestion_control: %s)", name, maxName, readProc("tcp_available_congestion_control"))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("congestion control %q: not a name (auto, host, or one of tcp_available_congestion_control: %s)", name, readProc("tcp_available_congestion_control"))
		}
	}
	return nil
}

// Probe sets name on a TCP socket of its own and says why it cannot.
func Probe(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("a socket to try congestion control %s on: %w", name, err)
		}
	}
	defer unix.Close(fd)
	return explain(name, unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name))
}

// explain turns setsockopt's error for name into one that names the fix.
func explain(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("congestion control %s is not offered by this kernel (tcp_available_congestion_control: %s): load its module (modprobe tcp_%s) or pick another", name, readProc("tcp_available_congestion_control"), name)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("congestion control %s is not in net.ipv4.tcp_allowed_congestion_control (%s) and this process lacks CAP_NET_ADMIN: add it there (sysctl) or grant the capability", name, readProc("tcp_allowed_congestion_control"))
	}
	return fmt.Errorf("set congestion control %s: %w", name, err)
}

// Set sets name on the socket of rc (a net.Dialer's Control, a
// listener's, or an accepted connection's SyscallConn); "" sets nothing.
func Set(rc syscall.RawConn, name string) error {
	if name == "" {
		return nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return explain(name, serr)
}

// Of returns the congestion control the socket of rc runs.
func Of(rc syscall.RawConn) (string, error) {
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "\x00"), gerr
}

// readProc returns /proc/sys/net/ipv4/name, trimmed, or "unknown".
func readProc(name string) string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
