// Package deploy holds s2cs's deployment artifacts and the tests that
// check them against the real tools: the systemd units (systemd/,
// checked by systemd-analyze and run as systemd would), the container
// image recipe (Containerfile, built and run with podman), the
// container path without Go (compose/: two gateways, a producer and a
// consumer, run with podman-compose), and the Helm
// chart (helm/scistream, rendered and decoded strictly in the helmtest
// package, apart, so that nothing else compiles the Helm and Kubernetes
// libraries). docs/deploy.md is the operator's page; its commands are
// the ones these tests run.
package deploy
