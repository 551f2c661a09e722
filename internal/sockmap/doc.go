// Package sockmap redirects TCP bytes between two sockets inside the
// kernel with an eBPF SOCKHASH and an SK_SKB stream verdict program.
// (Design notes are filled in below.)
package sockmap
