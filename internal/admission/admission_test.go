package admission

import (
	"errors"
	"testing"

	"scistream/internal/pace"
)

// TestValidate: each field out of range is named; zero values pass.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		err   error
		field string
	}{
		{Quota{}.Validate(), ""},
		{Capacity{}.Validate(), ""},
		{Quota{Streams: -1}.Validate(), "Streams"},
		{Quota{Ports: -1}.Validate(), "Ports"},
		{Quota{Rate: pace.Max + 1}.Validate(), "Rate"},
		{Quota{Pending: -1}.Validate(), "Pending"},
		{Capacity{Rate: -1}.Validate(), "Rate"},
		{Capacity{Streams: -1}.Validate(), "Streams"},
		{Capacity{Conns: -1}.Validate(), "Conns"},
	} {
		var fe *FieldError
		switch {
		case c.field == "" && c.err != nil:
			t.Errorf("zero value refused: %v", c.err)
		case c.field != "" && (!errors.As(c.err, &fe) || fe.Field != c.field):
			t.Errorf("got %v, want a FieldError on %s", c.err, c.field)
		}
	}
	if q := (Quota{}).WithDefaults(); q.Streams != 64 || q.Ports != 256 || q.Pending != 16 || q.Rate != 0 {
		t.Errorf("defaults %+v", q)
	}
}
