package spec

import "context"

// What the external tests (package spec_test, which drive the
// specification through internal/spec/spechttp) need of the package's
// internals.

var (
	NodeBound = nodeBound
	OpenBolt  = openBolt
)

const MaxRequestNodes = maxRequestNodes

// Sizes returns the stored size of the published state and of what the
// store holds.
func (s *Spec) Sizes(ctx context.Context) (published, stored int, err error) {
	st, _, err := s.load(ctx)
	if err != nil {
		return 0, 0, err
	}
	return s.Snapshot().st.size, st.size, nil
}
