package helmtest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// route is OpenShift's route.openshift.io/v1 Route, field for field with
// the same JSON names, copied from github.com/openshift/api route/v1
// types.go (commit 2a3d739, August 2026) without the status, which a
// chart never writes: that module is not available to this build, and a
// strict decode needs only the shape.
type route struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              routeSpec `json:"spec"`
}

type routeSpec struct {
	Host              string                 `json:"host,omitempty"`
	Subdomain         string                 `json:"subdomain,omitempty"`
	Path              string                 `json:"path,omitempty"`
	To                routeTargetReference   `json:"to"`
	AlternateBackends []routeTargetReference `json:"alternateBackends,omitempty"`
	Port              *routePort             `json:"port,omitempty"`
	TLS               *routeTLSConfig        `json:"tls,omitempty"`
	WildcardPolicy    string                 `json:"wildcardPolicy,omitempty"` // None or Subdomain
	HTTPHeaders       *struct {
		Actions struct {
			Response []routeHTTPHeader `json:"response"`
			Request  []routeHTTPHeader `json:"request"`
		} `json:"actions,omitempty"`
	} `json:"httpHeaders,omitempty"`
}

type routeHTTPHeader struct {
	Name   string `json:"name"`
	Action struct {
		Type string `json:"type"`
		Set  *struct {
			Value string `json:"value"`
		} `json:"set,omitempty"`
	} `json:"action"`
}

type routeTargetReference struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Weight *int32 `json:"weight"`
}

type routePort struct {
	TargetPort intstr.IntOrString `json:"targetPort"`
}

type routeTLSConfig struct {
	Termination                   string `json:"termination"` // edge, passthrough or reencrypt
	Certificate                   string `json:"certificate,omitempty"`
	Key                           string `json:"key,omitempty"`
	CACertificate                 string `json:"caCertificate,omitempty"`
	DestinationCACertificate      string `json:"destinationCACertificate,omitempty"`
	InsecureEdgeTerminationPolicy string `json:"insecureEdgeTerminationPolicy,omitempty"` // None, Allow or Redirect
	ExternalCertificate           *struct {
		Name string `json:"name,omitempty"`
	} `json:"externalCertificate,omitempty"`
}
