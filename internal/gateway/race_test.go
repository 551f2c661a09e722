//go:build race

package gateway

// raceEnabled reports a test binary built with -race, whose shadow memory
// makes the process's RSS say nothing about the gateway's.
const raceEnabled = true
