//go:build !linux

package udpsock

// No way to exceed the system limit here.
const (
	soRcvBufForce = 0
	soSndBufForce = 0
)
