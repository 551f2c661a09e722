package helmtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/scistream"

// s2csBin is the s2cs that TestMain builds from the scistream module.
var s2csBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scistream-helmtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s2csBin = filepath.Join(dir, "s2cs")
	cmd := exec.Command("go", "build", "-o", s2csBin, "./cmd/s2cs")
	cmd.Dir = "../.."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build s2cs:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// values reads a value set as a user's values file.
func values(t *testing.T, text string) chartutil.Values {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

// render renders the chart as helm install gw1 -n scistream would, with
// missing values as errors (Strict).
func render(t *testing.T, vals chartutil.Values) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	opts := chartutil.ReleaseOptions{Name: "gw1", Namespace: "scistream", Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(chrt, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(chrt, rv)
}

// objects are the rendered objects, each decoded strictly into its type.
type objects struct {
	configMaps      []corev1.ConfigMap
	secrets         []corev1.Secret
	services        []corev1.Service
	statefulSets    []appsv1.StatefulSet
	routes          []route
	serviceMonitors []monitoringv1.ServiceMonitor
	notes           string
}

// decode splits the rendered files into objects and decodes each into
// its API type, refusing unknown fields, duplicate keys and kinds the
// chart should not make.
func decode(t *testing.T, files map[string]string) objects {
	t.Helper()
	var o objects
	for name, text := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			o.notes = text
			continue
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", name, err, doc)
			}
			var err error
			want := ""
			switch tm.Kind {
			case "ConfigMap":
				want, err = "v1", decodeInto(doc, &o.configMaps)
			case "Secret":
				want, err = "v1", decodeInto(doc, &o.secrets)
			case "Service":
				want, err = "v1", decodeInto(doc, &o.services)
			case "StatefulSet":
				want, err = "apps/v1", decodeInto(doc, &o.statefulSets)
			case "Route":
				want, err = "route.openshift.io/v1", decodeInto(doc, &o.routes)
			case "ServiceMonitor":
				want, err = "monitoring.coreos.com/v1", decodeInto(doc, &o.serviceMonitors)
			default:
				t.Fatalf("%s: a %s %s, which the chart should not make", name, tm.APIVersion, tm.Kind)
			}
			if err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", name, tm.Kind, err, doc)
			}
			if tm.APIVersion != want {
				t.Errorf("%s: %s of apiVersion %q, want %q", name, tm.Kind, tm.APIVersion, want)
			}
		}
	}
	return o
}

// decodeInto decodes doc strictly (no unknown field, no duplicate key)
// into a new element of list.
func decodeInto[T any](doc string, list *[]T) error {
	var v T
	err := yaml.UnmarshalStrict([]byte(doc), &v)
	*list = append(*list, v)
	return err
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// lintChart runs helm lint's checks with vals and fails on any warning.
func lintChart(t *testing.T, vals chartutil.Values) {
	t.Helper()
	l := lint.All(chartDir, vals, "scistream", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// checkNames checks what the API server would: names are DNS labels or
// subdomains, port names IANA service names, label values valid.
func checkNames(t *testing.T, o objects) {
	t.Helper()
	meta := []metav1.ObjectMeta{}
	for _, x := range o.configMaps {
		meta = append(meta, x.ObjectMeta)
	}
	for _, x := range o.secrets {
		meta = append(meta, x.ObjectMeta)
	}
	for _, x := range o.services {
		meta = append(meta, x.ObjectMeta)
		if errs := validation.IsDNS1035Label(x.Name); len(errs) > 0 {
			t.Errorf("Service name %q: %v", x.Name, errs)
		}
		seen := map[string]bool{}
		for _, p := range x.Spec.Ports {
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				t.Errorf("Service port name %q: %v", p.Name, errs)
			}
			key := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			if seen[p.Name] || seen[key] {
				t.Errorf("Service port %s (%s) given twice", p.Name, key)
			}
			seen[p.Name], seen[key] = true, true
		}
	}
	for _, x := range o.statefulSets {
		meta = append(meta, x.ObjectMeta)
		for _, c := range x.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
					t.Errorf("container port name %q: %v", p.Name, errs)
				}
			}
		}
	}
	for _, x := range o.routes {
		meta = append(meta, x.ObjectMeta)
	}
	for _, x := range o.serviceMonitors {
		meta = append(meta, x.ObjectMeta)
	}
	for _, m := range meta {
		if errs := validation.IsDNS1123Subdomain(m.Name); len(errs) > 0 {
			t.Errorf("name %q: %v", m.Name, errs)
		}
		for k, v := range m.Labels {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("%s: label %s=%s: %v", m.Name, k, v, errs)
			}
		}
	}
}

// printed is what s2cs --print_config says of the rendered configuration
// file with the container's own arguments (the pod's IP for
// $(POD_IP)): the real loader's verdict and the effective settings.
func printed(t *testing.T, o objects, podIP string) (map[string]any, string, error) {
	t.Helper()
	if len(o.configMaps) != 1 || len(o.statefulSets) != 1 {
		t.Fatalf("%d ConfigMaps and %d StatefulSets, want one each", len(o.configMaps), len(o.statefulSets))
	}
	file := filepath.Join(t.TempDir(), "s2cs.yaml")
	if err := os.WriteFile(file, []byte(o.configMaps[0].Data["s2cs.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	c := o.statefulSets[0].Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env[e.Name] = podIP
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = o.statefulSets[0].Name + "-0" // the first pod's
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s comes from %v, which this test cannot give", e.Name, e.ValueFrom)
		}
	}
	var args []string
	for _, a := range c.Args {
		a = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := env[ref[2:len(ref)-1]]
			if !ok {
				t.Fatalf("argument %q names an undefined variable", a)
			}
			return v
		})
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + file
		}
		args = append(args, a)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(s2csBin, append(args, "--print_config")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stderr.String(), err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(stdout.Bytes(), &cfg); err != nil {
		t.Fatalf("s2cs --print_config is not YAML: %v\n%s", err, stdout.String())
	}
	return cfg, stderr.String(), nil
}

// checkFit checks that the objects fit each other and s2cs's effective
// settings: the Service's ports are the ones s2cs serves, every volume
// the pod mounts exists, the paths in the configuration are where the
// Secrets are mounted, the Route leads to the Service's WAN port under
// the gateway's domain, the ServiceMonitor selects the Service.
func checkFit(t *testing.T, o objects, cfg map[string]any) {
	t.Helper()
	if len(o.services) != 1 {
		t.Fatalf("%d Services, want 1", len(o.services))
	}
	svc, sts := o.services[0], o.statefulSets[0]
	pod := sts.Spec.Template
	num := func(k string) int {
		f, ok := cfg[k].(float64)
		if !ok {
			t.Fatalf("s2cs's %s = %v", k, cfg[k])
		}
		return int(f)
	}
	// A facility's nodes (s2cs says a node name: the pod's), or one pod.
	node, _ := cfg["node"].(string)
	if node == "" && *sts.Spec.Replicas != 1 || node != "" && (node != sts.Name+"-0" || sts.Spec.PodManagementPolicy != "Parallel") {
		t.Errorf("StatefulSet replicas %d, pods started %q; s2cs node %q: want one pod, or each pod a node named after it, started in parallel", *sts.Spec.Replicas, sts.Spec.PodManagementPolicy, node)
	}
	if sts.Spec.ServiceName != svc.Name {
		t.Errorf("StatefulSet serviceName %q, want %q", sts.Spec.ServiceName, svc.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the StatefulSet's or the Service's selector does not select the pod (%v)", err)
	}
	// Ports.
	c := pod.Spec.Containers[0]
	cport := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		cport[p.Name] = p
	}
	sport := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		sport[p.Name] = p
		if p.TargetPort.Type == 1 { // a name: the container's port of that name and protocol
			if cp, ok := cport[p.TargetPort.StrVal]; !ok || cp.Protocol != p.Protocol {
				t.Errorf("Service port %s targets %q, no container port of protocol %s", p.Name, p.TargetPort.StrVal, p.Protocol)
			}
		}
	}
	if p := sport["control"]; int(p.Port) != num("port") || int(cport["control"].ContainerPort) != num("port") {
		t.Errorf("control port: Service %d, container %d, s2cs %d", p.Port, cport["control"].ContainerPort, num("port"))
	}
	if wan := num("wan_port"); wan != 0 {
		if int(sport["wan"].Port) != wan || int(cport["wan"].ContainerPort) != wan || int(cport["wan-udp"].ContainerPort) != wan {
			t.Errorf("WAN port: Service %d, container %d/%d, s2cs %d", sport["wan"].Port, cport["wan"].ContainerPort, cport["wan-udp"].ContainerPort, wan)
		}
	} else if _, ok := sport["wan"]; ok {
		t.Error("a Service WAN port without s2cs's wan_port")
	}
	var lo, hi int
	if _, err := fmt.Sscanf(cfg["port_range"].(string), "%d-%d", &lo, &hi); err != nil {
		t.Fatalf("s2cs's port_range %v", cfg["port_range"])
	}
	var data []int
	for _, p := range svc.Spec.Ports {
		if strings.HasPrefix(p.Name, "d") && p.Protocol == corev1.ProtocolTCP {
			data = append(data, int(p.Port))
			if p.TargetPort.IntValue() != int(p.Port) {
				t.Errorf("data port %d targets %v: peers dial the port s2cs reports", p.Port, p.TargetPort)
			}
		}
	}
	if len(data) > 0 && (data[0] != lo || data[len(data)-1] != hi || len(data) != hi-lo+1) {
		t.Errorf("Service data ports %d..%d (%d), s2cs's port_range %d-%d", data[0], data[len(data)-1], len(data), lo, hi)
	}
	if len(data) > 0 && node != "" {
		t.Errorf("Service data ports %d..%d in front of a facility's pods: a channel's port lives on one pod, the Service would send its connections to any", data[0], data[len(data)-1])
	}
	// Volumes and the paths s2cs reads.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
		_, isVol := vols[m.Name]
		isClaim := slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name })
		if !isVol && !isClaim {
			t.Errorf("volume mount %s of no volume", m.Name)
		}
	}
	if cfg["state_dir"] != mounts["state"].MountPath {
		t.Errorf("s2cs's state_dir %v, the state volume at %q", cfg["state_dir"], mounts["state"].MountPath)
	}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Mi")) < 0 {
			t.Errorf("state volume requests %v", q.String())
		}
	}
	secretFile := func(vol, key string) string {
		v, ok := vols[vol]
		if !ok || v.Secret == nil {
			return ""
		}
		for _, it := range v.Secret.Items {
			if it.Key == key {
				return filepath.Join(mounts[vol].MountPath, it.Path)
			}
		}
		return ""
	}
	if p := secretFile("tokens", "tokens"); cfg["tokens"] != p && (p != "" || cfg["insecure_no_auth"] != true) {
		t.Errorf("s2cs's tokens %v, the tokens Secret's file %q", cfg["tokens"], p)
	}
	if p := secretFile("tls", "tls.crt"); cfg["server_crt"] != p {
		t.Errorf("s2cs's server_crt %v, the TLS Secret's file %q", cfg["server_crt"], p)
	}
	if p := secretFile("tls", "tls.key"); cfg["server_key"] != p {
		t.Errorf("s2cs's server_key %v, the TLS Secret's file %q", cfg["server_key"], p)
	}
	// s2cs refuses a private key others may read: the key's file is
	// mounted for the owner and the pod's fsGroup only.
	if v, ok := vols["tls"]; ok && v.Secret != nil {
		for _, it := range v.Secret.Items {
			if it.Key != "tls.key" {
				continue
			}
			mode := v.Secret.DefaultMode
			if it.Mode != nil {
				mode = it.Mode
			}
			switch {
			case mode == nil:
				t.Errorf("the TLS Secret's tls.key is mounted with Kubernetes' default mode 0644; s2cs refuses a key others may read (want 0440)")
			case *mode&0o007 != 0:
				t.Errorf("the TLS Secret's tls.key is mounted with mode %04o; s2cs refuses a key others may read (want 0440)", *mode)
			}
		}
	}
	// s2cs refuses a file it trusts (configuration, tokens, keys, CAs)
	// that its group or others may write, or that lies in a directory
	// they may write unless that is sticky or read-only: the kubelet
	// makes a ConfigMap's directory 0777, so every volume of s2cs's files
	// is mounted read-only, with modes no one else may write.
	for _, name := range []string{"config", "tokens", "tls", "etcd"} {
		v, ok := vols[name]
		if !ok {
			continue
		}
		if !mounts[name].ReadOnly {
			t.Errorf("volume %s is mounted writable: s2cs refuses the ConfigMap's directory (mode 0777) unless it is read-only", name)
		}
		modes := map[string]*int32{}
		switch {
		case v.ConfigMap != nil:
			modes[""] = v.ConfigMap.DefaultMode
			for _, it := range v.ConfigMap.Items {
				modes[it.Key] = it.Mode
			}
		case v.Secret != nil:
			modes[""] = v.Secret.DefaultMode
			for _, it := range v.Secret.Items {
				modes[it.Key] = it.Mode
			}
		}
		for key, m := range modes {
			if m != nil && *m&0o022 != 0 {
				t.Errorf("volume %s: %q mounted with mode %04o, which its group or others may write; s2cs refuses it", name, key, *m)
			}
		}
	}
	for _, s := range o.secrets {
		if v := vols["tokens"]; v.Secret == nil || v.Secret.SecretName != s.Name {
			t.Errorf("Secret %s made but not mounted", s.Name)
		}
		if _, ok := s.StringData["tokens"]; !ok {
			t.Errorf("Secret %s has no key tokens", s.Name)
		}
	}
	if v := vols["config"]; v.ConfigMap == nil || v.ConfigMap.Name != o.configMaps[0].Name {
		t.Errorf("the config volume is not the ConfigMap %s", o.configMaps[0].Name)
	}
	// Probes reach /healthz on the control port over HTTPS.
	for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "control" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v: want GET /healthz on control over HTTPS", what, p)
		}
	}
	// The Route: passthrough to the Service's WAN port, wildcard under
	// wan_domain, advertised as s2cs says.
	for _, r := range o.routes {
		if r.Spec.To.Kind != "Service" || r.Spec.To.Name != svc.Name || r.Spec.Port == nil || r.Spec.Port.TargetPort.StrVal != "wan" {
			t.Errorf("Route to %+v port %+v: want the Service %s's port wan", r.Spec.To, r.Spec.Port, svc.Name)
		}
		if r.Spec.TLS == nil || r.Spec.TLS.Termination != "passthrough" || r.Spec.TLS.Certificate != "" || r.Spec.TLS.Key != "" || r.Spec.Path != "" {
			t.Errorf("Route TLS %+v path %q: want passthrough, no certificate of its own, no path", r.Spec.TLS, r.Spec.Path)
		}
		domain, _ := cfg["wan_domain"].(string)
		if r.Spec.WildcardPolicy != "Subdomain" || !strings.HasSuffix(r.Spec.Host, "."+domain) || strings.Count(r.Spec.Host, ".") != strings.Count(domain, ".")+1 {
			t.Errorf("Route host %q policy %q: want one label under wan_domain %q, wildcard", r.Spec.Host, r.Spec.WildcardPolicy, domain)
		}
		if errs := validation.IsDNS1123Subdomain(r.Spec.Host); len(errs) > 0 {
			t.Errorf("Route host %q: %v", r.Spec.Host, errs)
		}
		if cfg["wan_advertise"] != r.Spec.Host+":443" {
			t.Errorf("s2cs advertises %v, the Route is %s:443", cfg["wan_advertise"], r.Spec.Host)
		}
	}
	// The ServiceMonitor scrapes /metrics on the Service's control port.
	for _, sm := range o.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not select the Service (%v)", sm.Spec.Selector, err)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %v", sm.Spec.Endpoints)
		}
		ep := sm.Spec.Endpoints[0]
		if ep.Port != "control" || ep.Path != "/metrics" || ep.Scheme == nil || ep.Scheme.String() != "https" ||
			ep.Authorization == nil || ep.Authorization.Credentials == nil || ep.Authorization.Credentials.Name == "" {
			t.Errorf("ServiceMonitor endpoint %+v: want https /metrics on control with a bearer token Secret", ep)
		}
	}
}

// TestChart renders the chart for value sets an operator would use, with
// helm lint's checks, decodes every object strictly, and checks that they
// fit together and that the real s2cs accepts the rendered configuration
// file with the container's arguments.
func TestChart(t *testing.T) {
	openshift, err := os.ReadFile("../helm/values-openshift.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, values string
		kinds        []string
	}{
		{"tokens from lines", "tokens:\n  lines: ['" + strings.Repeat("ab", 32) + " alice']\n",
			[]string{"ConfigMap", "Secret", "Service", "StatefulSet"}},
		{"openshift", string(openshift), []string{"ConfigMap", "Service", "StatefulSet", "Route", "ServiceMonitor"}},
		{"host network, load balancer, no UDP", `
hostNetwork: true
listenerIP: 203.0.113.7
service: {type: LoadBalancer, udp: false, annotations: {metallb.universe.tf/loadBalancerIPs: 203.0.113.7}}
tokens: {existingSecret: gw-tokens}
tls: {existingSecret: gw-tls}
config:
  port: 443
  port_range: 6000-6255
  type: buffer
  buffer_size: 16MiB
  insecure_tcp_wan: true
  pending_timeout: 10m
  quota_streams: 8
  resume_window: 2m
  resume_window_max: 1h
  resume_conn_buffer: 64MiB
  resume_buffer: 4GiB
`, []string{"ConfigMap", "Service", "StatefulSet"}},
		{"no data ports, no auth", "config: {insecure_no_auth: true, port_range: 7000-7999}\nservice: {dataPorts: false}\n",
			[]string{"ConfigMap", "Service", "StatefulSet"}},
		{"facility of three behind a route", `
facility: {enabled: true, replicas: 3, etcdSecret: gw-etcd}
tokens: {existingSecret: gw-tokens}
tls: {existingSecret: gw-tls}
route: {enabled: true}
config:
  store: etcd://etcd-0.etcd:2379,etcd-1.etcd:2379
  insecure_etcd: true # the test has no etcd CA file for etcd_ca
  wan_port: 8443
  wan_domain: wan.gw.apps.example.org
  takeover: 6s
`, []string{"ConfigMap", "Route", "Service", "StatefulSet"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			vals := values(t, c.values)
			lintChart(t, vals)
			files, err := render(t, vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			o := decode(t, files)
			var kinds []string
			for k, n := range map[string]int{"ConfigMap": len(o.configMaps), "Secret": len(o.secrets), "Service": len(o.services),
				"StatefulSet": len(o.statefulSets), "Route": len(o.routes), "ServiceMonitor": len(o.serviceMonitors)} {
				for range n {
					kinds = append(kinds, k)
				}
			}
			slices.Sort(kinds)
			want := slices.Clone(c.kinds)
			slices.Sort(want)
			if !slices.Equal(kinds, want) {
				t.Fatalf("objects %v, want %v", kinds, want)
			}
			checkNames(t, o)
			podIP := "10.128.2.17"
			cfg, stderr, err := printed(t, o, podIP)
			if err != nil {
				t.Fatalf("s2cs refuses the rendered configuration with the container's arguments: %v\n%s\n%s", err, stderr, o.configMaps[0].Data["s2cs.yaml"])
			}
			wantIP := podIP
			if ip, _ := vals["listenerIP"].(string); ip != "" {
				wantIP = ip
			}
			if cfg["listener_ip"] != wantIP || cfg["bind"] != podIP {
				t.Errorf("s2cs's listener_ip %v bind %v; want %s and the pod's IP", cfg["listener_ip"], cfg["bind"], wantIP)
			}
			checkFit(t, o, cfg)
			if !strings.Contains(o.notes, "kubectl -n scistream rollout status statefulset/gw1-scistream") {
				t.Errorf("NOTES:\n%s", o.notes)
			}
			t.Logf("rendered, decoded and checked in %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestChartRefuses: what a careless operator puts in the values. Helm
// refuses each at install with a message naming the value and the fix
// (the schema, or the chart's own checks).
func TestChartRefuses(t *testing.T) {
	lines := "tokens:\n  lines: ['" + strings.Repeat("ab", 32) + " alice']\n"
	for _, c := range []struct{ name, values, want string }{
		{"no authentication", "", "no authentication: set tokens.existingSecret"},
		{"listener_ip in config", lines + "config: {listener_ip: 10.0.0.3}\n", "config.listener_ip: the chart sets it"},
		{"state_dir in config", lines + "config: {state_dir: /data}\n", "config.state_dir: the chart sets it"},
		{"tokens both ways", "tokens: {existingSecret: t}\nconfig: {tokens: /etc/t}\n", "config.tokens: the chart sets it"},
		{"certificate both ways", lines + "tls: {existingSecret: t}\nconfig: {server_crt: /a, server_key: /b}\n", "config.server_crt/server_key: the chart sets them"},
		{"route without a WAN port", lines + "route: {enabled: true}\n", "route.enabled needs config.wan_port"},
		{"facility without a certificate", lines + "facility: {enabled: true}\nconfig: {store: 'etcd://etcd:2379'}\n", "facility.enabled needs tls.existingSecret"},
		{"facility without etcd", lines + "facility: {enabled: true}\ntls: {existingSecret: t}\n", "facility.enabled needs config.store: etcd://"},
		{"facility with a node name", lines + "facility: {enabled: true}\ntls: {existingSecret: t}\nconfig: {store: 'etcd://etcd:2379', node: a}\n", "config.node: the chart names each node"},
		{"a node name without a facility", lines + "config: {node: a}\n", "config.node: a gateway of one pod is no node"},
		{"a facility of none", lines + "facility: {enabled: true, replicas: 0}\n", "at '/facility/replicas'"},
		{"route without a domain", lines + "route: {enabled: true}\nconfig: {wan_port: 8443}\n", "route.enabled needs config.wan_domain"},
		{"a huge port range", lines + "config: {port_range: 5000-6000}\n", `config.port_range "5000-6000" has 1001 ports: a Service lists each, so give at most 256`},
		{"a port range backwards", lines + "config: {port_range: 6000-5000}\n", `config.port_range "6000-5000": give LO-HI`},
		{"a port range of one word", lines + "config: {port_range: many}\n", `config.port_range "many": give LO-HI`},
		{"monitor without a token", lines + "serviceMonitor: {enabled: true}\n", "serviceMonitor.enabled needs serviceMonitor.tokenSecret.name"},
		{"a raw token in lines", "tokens:\n  lines: ['my-secret-token alice']\n", "at '/tokens/lines/0': 'my-secret-token alice' does not match pattern"},
		{"a kebab-case key", lines + "config: {port-range: 5100-5110}\n", "'port-range' does not match pattern"},
		{"a nested config value", lines + "config: {pool: {max_warm: 3}}\n", "at '/config/pool'"},
		{"an unknown value", lines + "replicas: 3\n", "additional properties 'replicas' not allowed"},
		{"a number for a string", lines + "image: {repository: scistream, tag: 1.0}\n", "at '/image/tag': got number, want string"},
		{"a wrong service type", lines + "service: {type: ExternalName}\n", "at '/service/type': value must be one of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(t, values(t, c.values))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("render: %v; want an error mentioning %q", err, c.want)
			}
		})
	}
}

// TestChartConfigChecked: a mistake in values.config that only s2cs can
// see (a misspelt key, a duration without its unit) renders, and the
// real loader refuses it at the pod's start, naming the key: this test
// runs that loader on the rendered file.
func TestChartConfigChecked(t *testing.T) {
	lines := "tokens:\n  lines: ['" + strings.Repeat("ab", 32) + " alice']\n"
	for _, c := range []struct{ config, want string }{
		{"{lisener_port: 5000}", "lisener_port: unknown key"},
		{"{pending_timeout: 300}", `pending_timeout: "300": want a duration with its unit`},
		{"{type: zerocopy}", `--type "zerocopy" is not an engine`},
		{"{wan_port: 8443, wan_domain: Not_A_Domain}", "--wan_domain"},
		{"{resume_window: 30}", `resume_window: "30": want a duration with its unit`},
		{"{resume_buffer: 1MiB}", "--resume_buffer 1MiB is less than --resume_conn_buffer 16MiB"},
	} {
		t.Run(c.config, func(t *testing.T) {
			files, err := render(t, values(t, lines+"config: "+c.config+"\n"))
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			_, stderr, err := printed(t, decode(t, files), "10.128.2.17")
			if err == nil || !strings.Contains(stderr, c.want) {
				t.Errorf("s2cs: %v, %q; want a refusal mentioning %q", err, stderr, c.want)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("s2cs's refusal is not one line: %q", stderr)
			}
		})
	}
}
