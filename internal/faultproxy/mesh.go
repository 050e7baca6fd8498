package faultproxy

import "errors"

// Mesh is a Proxy for every ordered pair of distinct members of a group (each member's links to
// the others, as Raft peers dial each other), so a test can cut one member from the rest: the
// proxy of (i, j) carries member i's traffic to member j. Its methods are safe for concurrent
// use.
type Mesh struct {
	targets []string
	links   [][]*Proxy // links[i][j]; nil for i == j
}

// StartMesh starts the proxies of a group whose members listen on targets (host:port).
func StartMesh(targets []string) (*Mesh, error) {
	m := &Mesh{targets: targets, links: make([][]*Proxy, len(targets))}
	for i := range targets {
		m.links[i] = make([]*Proxy, len(targets))
		for j, target := range targets {
			if i == j {
				continue
			}
			p, err := Start(target)
			if err != nil {
				_ = m.Close()
				return nil, err
			}
			m.links[i][j] = p
		}
	}
	return m, nil
}

// Addr returns the address member i dials to reach member j: the proxy's, or j's own for i == j.
func (m *Mesh) Addr(i, j int) string {
	if i == j {
		return m.targets[j]
	}
	return m.links[i][j].Addr()
}

// Of returns the proxies of every link to or from member k.
func (m *Mesh) Of(k int) []*Proxy {
	var out []*Proxy
	for j := range m.targets {
		if j != k {
			out = append(out, m.links[k][j], m.links[j][k])
		}
	}
	return out
}

// HealAll heals every link.
func (m *Mesh) HealAll() {
	for k := range m.targets {
		for _, p := range m.Of(k) {
			p.Heal()
		}
	}
}

// Close closes every proxy and returns the errors joined.
func (m *Mesh) Close() error {
	var errs []error
	for _, row := range m.links {
		for _, p := range row {
			if p != nil {
				errs = append(errs, p.Close())
			}
		}
	}
	return errors.Join(errs...)
}
