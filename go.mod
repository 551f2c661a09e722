module scistream

go 1.26.8

require (
	github.com/quic-go/quic-go v0.65.0
	go.etcd.io/bbolt v1.5.0
	golang.org/x/net v0.56.0
	golang.org/x/sys v0.49.0
)

require golang.org/x/crypto v0.54.0 // indirect
