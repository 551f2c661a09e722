package main

import (
	"os"
)

// A SIGHUP means two things to a program on a terminal: "reload" when
// someone sends it (kill -HUP, systemctl reload), and "your terminal is
// gone" when the terminal closes. s2cs reloads on the first and stops on
// the second, as a program in the foreground of a terminal does: a
// gateway started by hand is not left running, unseen, once its terminal
// window closes. The kernel takes the controlling terminal away from
// every process of the session before the shell passes the hang-up on,
// so a SIGHUP that finds no controlling terminal where s2cs started with
// one is the terminal's.

// controllingTTY reports whether the process has a controlling terminal
// now.
func controllingTTY() bool {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// hangup tells a SIGHUP of a closed terminal from one sent to reload.
type hangup struct{ hadTTY bool }

// newHangup notes whether s2cs starts with a controlling terminal.
func newHangup() hangup { return hangup{hadTTY: controllingTTY()} }

// terminalGone reports whether a SIGHUP that came now is the hang-up of
// the terminal s2cs started on.
func (h hangup) terminalGone() bool { return h.hadTTY && !controllingTTY() }
