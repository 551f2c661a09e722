package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ).
// It is 100 on every Linux architecture Go supports (the kernel's
// USER_HZ, which sysconf(_SC_CLK_TCK) reports); we assume it rather than
// call sysconf, which Go does not expose without cgo. The resolution of
// the CPU times is therefore 10 ms.
const ClockTicks = 100

// ProcessCPU returns the user plus system CPU time a process has used
// so far, from /proc/PID/stat (fields 14 utime and 15 stime).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU extracts utime+stime from the contents of /proc/PID/stat.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time: malformed /proc stat line")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time: /proc stat line has %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 and 15
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("cpu time: bad field %q", s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / ClockTicks, nil
}
