package facility

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"scistream/internal/bench"
	"scistream/internal/certs"
	"scistream/internal/client"
	"scistream/internal/localgw"
)

// facNodes is one facility of s2bench facility: n real s2cs nodes
// (--node) on loopback addresses of their own, sharing one etcd under
// one facility name, one WAN certificate (a peer pins one per stream)
// and one port range. A node can be killed and started again under its
// name, on its address.
type facNodes struct {
	name  string
	dir   string
	token string
	opts  []localgw.Options // each node's, to start it again
	nodes []*localgw.Gateway
	cls   []*client.Client
}

// facEnv is what every facility of a run shares: the s2cs binary, the
// etcd endpoint, the token and the run's directory.
type facEnv struct {
	s2cs, etcd    string
	dir           string
	token, tokens string // the bearer token and the file of its hash
	args          []string
}

// newFacEnv writes the token file under dir.
func newFacEnv(s2cs, etcd, dir string, args []string) (*facEnv, error) {
	env := &facEnv{s2cs: s2cs, etcd: etcd, dir: dir, token: localgw.NewToken(), tokens: filepath.Join(dir, "tokens"), args: args}
	if err := localgw.WriteTokens(env.tokens, map[string]string{"s2bench": env.token}); err != nil {
		return nil, err
	}
	return env, nil
}

// startFacNodes starts the n nodes of facility name with the extra s2cs
// flags, and waits until each sees all n. On error it stops what it
// started.
func (env *facEnv) startFacNodes(ctx context.Context, name string, n int, extra ...string) (_ *facNodes, err error) {
	f := &facNodes{name: name, dir: filepath.Join(env.dir, name), token: env.token}
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, err
	}
	ips, err := localgw.DistinctLoopbacks(n)
	if err != nil {
		return nil, err
	}
	crt, key, err := certs.SelfSigned(ips, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	crtFile, keyFile := filepath.Join(f.dir, "gw.crt"), filepath.Join(f.dir, "gw.key")
	if err := os.WriteFile(crtFile, crt, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return nil, err
	}
	for i, ip := range ips {
		node := fmt.Sprintf("%s-%d", name, i)
		args := append(slices.Clone(env.args), "--store", "etcd://"+env.etcd, "--store_facility", name, "--node", node,
			"--server_crt", crtFile, "--server_key", keyFile)
		f.opts = append(f.opts, localgw.Options{S2CS: env.s2cs, ListenerIP: ip, StateDir: filepath.Join(f.dir, node),
			TokensFile: env.tokens, Args: append(args, extra...)})
		f.nodes = append(f.nodes, nil)
		f.cls = append(f.cls, nil)
		if err := f.start(ctx, i); err != nil {
			return nil, err
		}
	}
	return f, f.waitNodes(ctx, n)
}

// start starts node i (again) and opens its client.
func (f *facNodes) start(ctx context.Context, i int) error {
	g, err := localgw.Start(ctx, f.opts[i])
	if err != nil {
		return fmt.Errorf("start node %s: %w", f.nodeName(i), err)
	}
	c, err := g.Client(f.token)
	if err != nil {
		g.Stop()
		return err
	}
	f.nodes[i], f.cls[i] = g, c
	return nil
}

func (f *facNodes) nodeName(i int) string { return fmt.Sprintf("%s-%d", f.name, i) }

// index returns the index of the node named name, or -1.
func (f *facNodes) index(name string) int {
	for i := range f.nodes {
		if f.nodeName(i) == name {
			return i
		}
	}
	return -1
}

// kill ends node i with SIGKILL, as a crash would.
func (f *facNodes) kill(i int) {
	f.cls[i].Close()
	f.nodes[i].Kill()
	f.nodes[i], f.cls[i] = nil, nil
}

// live returns the index of a running node other than not, or -1.
func (f *facNodes) live(not int) int {
	for i, g := range f.nodes {
		if g != nil && i != not {
			return i
		}
	}
	return -1
}

// waitNodes waits until every running node's /v1/info lists n live
// nodes: a stream created then is spread over all of them.
func (f *facNodes) waitNodes(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		var seen int
		for _, c := range f.cls {
			if c == nil {
				continue
			}
			info, err := c.Info(ctx)
			if err != nil || len(info.Nodes) != n {
				ok = false
				if err == nil {
					seen = len(info.Nodes)
				}
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("facility %s: a node sees %d live nodes, not %d, after 30s", f.name, seen, n)
		}
	}
}

// cpu returns the CPU time every running node has used so far.
func (f *facNodes) cpu() (time.Duration, error) {
	var total time.Duration
	for _, g := range f.nodes {
		if g == nil {
			continue
		}
		d, err := bench.ProcessCPU(g.PID())
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// pids returns the running nodes' process IDs.
func (f *facNodes) pids() []int {
	var out []int
	for _, g := range f.nodes {
		if g != nil {
			out = append(out, g.PID())
		}
	}
	return out
}

// stop stops every running node (SIGTERM, by PID) and closes the
// clients. Idempotent.
func (f *facNodes) stop() error {
	var errs []error
	for i, g := range f.nodes {
		if f.cls[i] != nil {
			f.cls[i].Close()
		}
		if g != nil {
			if err := g.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop node %s (pid %d): %w", f.nodeName(i), g.PID(), err))
			}
		}
		f.nodes[i], f.cls[i] = nil, nil
	}
	return errors.Join(errs...)
}
