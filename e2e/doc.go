// Package e2e drives the real s2cs and s2uc binaries over real sockets
// and real TLS on loopback addresses, the way a facility operator and a
// scientist use them. It has no non-test code beyond this comment.
package e2e
