package udpsock

import "syscall"

// Socket options that set a buffer beyond the system limit (with
// CAP_NET_ADMIN).
const (
	soRcvBufForce = syscall.SO_RCVBUFFORCE
	soSndBufForce = syscall.SO_SNDBUFFORCE
)
