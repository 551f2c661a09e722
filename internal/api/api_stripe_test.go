package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStripeField: a request of one leg carries no stripe field at all
// (a gateway of a release without striping refuses a field it does not
// know), one of several does.
func TestStripeField(t *testing.T) {
	for _, c := range []struct {
		n       int
		present bool
	}{{0, false}, {1, false}, {2, true}, {16, true}} {
		b, err := json.Marshal(OutboundRequest{UID: "u", Stripe: StripeField(c.n)})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"stripe"`); got != c.present {
			t.Errorf("stripe %d: %s; want the field present %v", c.n, b, c.present)
		}
	}
}
