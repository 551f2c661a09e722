package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessRSS returns a process's resident memory in bytes, from the VmRSS
// line of /proc/PID/status.
func ProcessRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("resident memory of pid %d: %w", pid, err)
	}
	return parseStatusRSS(string(b))
}

// parseStatusRSS extracts VmRSS ("VmRSS:	  12345 kB") from the contents
// of /proc/PID/status.
func parseStatusRSS(status string) (int64, error) {
	for _, l := range strings.Split(status, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				return 0, fmt.Errorf("resident memory: bad VmRSS %q", f[1])
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("resident memory: no VmRSS line in /proc status")
}
