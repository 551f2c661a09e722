package intake

import (
	"fmt"
	"time"

	"scistream/internal/api"
)

// Bounds are the gateway's defaults and maxima for what a request may
// leave out or ask for: how long an inbound stream waits for its
// application, and a stream's lease (s2cs --app_wait_default,
// --app_wait_max, --lease_default, --lease_max). Its zero value is the
// defaults below.
type Bounds struct {
	// AppWaitDefault is how long an inbound stream whose request gives no
	// app_wait_s holds a WAN connection whose application cannot be
	// reached, dialing it again with backoff, before it resets the
	// connection (see api.InboundRequest.AppWaitS). Whole seconds. If
	// zero, DefaultAppWait; if negative, such streams do not wait.
	AppWaitDefault time.Duration
	// AppWaitMax is the longest app_wait_s a request may ask for, and
	// caps that of a restored stream. Whole seconds, at most
	// api.MaxAppWaitS. If zero, DefaultAppWaitMax; if negative, no
	// stream waits (a request may ask for 0 only).
	AppWaitMax time.Duration
	// LeaseDefault is the lease of a stream whose request gives none
	// (api.InboundRequest.LeaseS): when it runs out without a renewal,
	// the gateway releases the stream (state expired). Whole seconds. If
	// zero, DefaultLease, or LeaseMax if that is shorter.
	LeaseDefault time.Duration
	// LeaseMax is the longest lease a request or a renewal may ask for.
	// Whole seconds. If zero, DefaultLeaseMax.
	LeaseMax time.Duration
}

// DefaultAppWait is how long an inbound stream waits for its
// application when neither the request nor Bounds.AppWaitDefault says:
// long enough for a consumer started by hand or by a job script just
// after the producer, short enough that a producer pointed at a consumer
// that never comes hears of it (a reset) within a minute.
const DefaultAppWait = 30 * time.Second

// DefaultAppWaitMax is the longest wait a request may ask for when
// Bounds.AppWaitMax is zero: a consumer that is a batch job may start
// minutes after its producer.
const DefaultAppWaitMax = 10 * time.Minute

// DefaultLease is a stream's lease when neither its request nor
// Bounds.LeaseDefault gives one: a working day and then some, so that a
// stream someone forgot frees its ports and reservation by the next day.
const DefaultLease = 24 * time.Hour

// DefaultLeaseMax is the longest lease when Bounds.LeaseMax is zero: a
// week; longer runs renew (s2uc update --lease).
const DefaultLeaseMax = 7 * 24 * time.Hour

// A FieldError names the Bounds field that Validate refused; Problem
// completes a sentence that starts with the field's name.
type FieldError struct{ Field, Problem string }

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

func fieldError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first of b's settings a gateway refuses, as a
// *FieldError.
func (b Bounds) Validate() error {
	switch {
	case b.LeaseDefault < 0 || b.LeaseDefault%time.Second != 0:
		return fieldError("LeaseDefault", "%s is not a positive whole number of seconds: give e.g. 24h", b.LeaseDefault)
	case b.LeaseMax < 0 || b.LeaseMax%time.Second != 0:
		return fieldError("LeaseMax", "%s is not a positive whole number of seconds: give e.g. 168h", b.LeaseMax)
	case b.AppWaitDefault > 0 && b.AppWaitDefault%time.Second != 0:
		return fieldError("AppWaitDefault", "%s is not a whole number of seconds: give e.g. 30s", b.AppWaitDefault)
	case b.AppWaitMax > 0 && b.AppWaitMax%time.Second != 0:
		return fieldError("AppWaitMax", "%s is not a whole number of seconds: give e.g. 10m", b.AppWaitMax)
	case b.AppWaitMax > api.MaxAppWaitS*time.Second:
		return fieldError("AppWaitMax", "%s is longer than a day: give at most 24h", b.AppWaitMax)
	}
	r := b.Resolve()
	if r.AppWaitDefault > r.AppWaitMax {
		return fieldError("AppWaitDefault", "%s exceeds the longest wait a stream may have (%s): lower it, or raise the maximum", r.AppWaitDefault, r.AppWaitMax)
	}
	if r.LeaseDefault > r.LeaseMax {
		return fieldError("LeaseDefault", "%s exceeds the longest lease (%s): lower it, or raise the maximum", r.LeaseDefault, r.LeaseMax)
	}
	return nil
}

// Resolve returns b with its zeros (defaults) and negatives (no wait)
// resolved: every field then holds what the gateway applies. A lease
// maximum under DefaultLease is the default lease too.
func (b Bounds) Resolve() Bounds {
	wait := func(d, zero time.Duration) time.Duration {
		switch {
		case d == 0:
			return zero
		case d < 0:
			return 0
		}
		return d
	}
	b.AppWaitDefault, b.AppWaitMax = wait(b.AppWaitDefault, DefaultAppWait), wait(b.AppWaitMax, DefaultAppWaitMax)
	if b.LeaseMax == 0 {
		b.LeaseMax = DefaultLeaseMax
	}
	if b.LeaseDefault == 0 {
		b.LeaseDefault = min(DefaultLease, b.LeaseMax)
	}
	return b
}
