package gateway

import "time"

// sampler samples every live stream's rates every RateInterval until the
// server shuts down.
func (s *Server) sampler() {
	defer s.wg.Done()
	tick := time.NewTicker(s.env.Rates.Interval())
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, st := range s.live() {
			st.Rates.Sample(now, st.ToWAN.Load(), st.FromWAN.Load())
		}
	}
}
