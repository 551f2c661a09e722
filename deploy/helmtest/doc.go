// Package helmtest checks the SciStream Helm chart (../helm/scistream):
// it renders the chart with the Helm SDK for several value sets, decodes
// every object strictly (an unknown field is an error) into the
// Kubernetes API types, the Route into a faithful copy of OpenShift's
// type and the ServiceMonitor into the Prometheus Operator's, checks that
// the objects fit together, and runs the real s2cs on the rendered
// configuration file with the container's arguments.
//
// It is a Go module of its own, so that the Helm and Kubernetes libraries
// (and the versions of golang.org/x modules they require) stay out of
// the scistream module's build; scripts/test.sh runs it.
package helmtest
