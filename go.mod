module scistream

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.49.0
)
