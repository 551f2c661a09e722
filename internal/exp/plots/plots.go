// Package plots draws an experiment's records (gonum/plot), as seed 000
// Fig. 6 and 7 and seed 001 Fig. 8 show them: goodput and jitter against
// message size, goodput against pair count, the RTT CDF of request-reply
// runs; direct, gateways and naive in the same colours and markers in
// every plot.
package plots

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"scistream/internal/bench"
	"scistream/internal/bytesize"
	"scistream/internal/exp/record"
)

// Colours and markers per path, the same in every plot: blues and
// circles for direct, reds and triangles (dashed) for gateways; further
// series of a path (other pair counts or sizes) take the next shade.
type style struct {
	c     color.Color
	shape draw.GlyphDrawer
	dash  []vg.Length
}

func shades(path string) []color.RGBA {
	switch path {
	case record.PathDirect:
		return []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0x08, 0x30, 0x6b, 0xff}, {0x6b, 0xae, 0xd6, 0xff}, {0x08, 0x51, 0x9c, 0xff}, {0x9e, 0xca, 0xe1, 0xff}}
	case record.PathGateways:
		return []color.RGBA{{0xd6, 0x27, 0x28, 0xff}, {0x67, 0x00, 0x0d, 0xff}, {0xfc, 0x92, 0x72, 0xff}, {0xa5, 0x0f, 0x15, 0xff}, {0xfb, 0x6a, 0x4a, 0xff}}
	case record.PathNaive:
		return []color.RGBA{{0x2c, 0xa0, 0x2c, 0xff}, {0x00, 0x44, 0x1b, 0xff}, {0x74, 0xc4, 0x76, 0xff}, {0x00, 0x6d, 0x2c, 0xff}, {0xa1, 0xd9, 0x9b, 0xff}}
	}
	return []color.RGBA{{0x44, 0x44, 0x44, 0xff}}
}

func pathStyle(path string, k int) style {
	sh := shades(path)
	st := style{c: sh[k%len(sh)], shape: draw.CircleGlyph{}}
	switch path {
	case record.PathGateways:
		st.shape, st.dash = draw.TriangleGlyph{}, []vg.Length{vg.Points(4), vg.Points(2)}
	case record.PathNaive:
		st.shape, st.dash = draw.SquareGlyph{}, []vg.Length{vg.Points(1), vg.Points(2)}
	}
	return st
}

// Write writes to dir, in format (svg or png), like seed 000 Fig. 6 and
// 7 and seed 001 Fig. 8:
// goodput and jitter against message size when several sizes ran (median
// over repetitions, with min-max bars), direct vs gateways, one line per
// path and pair count;
// goodput against pair count when several counts ran; and in
// request-reply mode the RTT CDF of each path per size (all repetitions
// pooled). It returns the files written.
func Write(dir, format string, recs []record.Record) ([]string, error) {
	var files []string
	save := func(p *plot.Plot, name string) error {
		f := filepath.Join(dir, name+"."+format)
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
			return err
		}
		files = append(files, f)
		return nil
	}
	var pairsList, sizes []int
	for _, r := range recs {
		if !slices.Contains(pairsList, r.Pairs) {
			pairsList = append(pairsList, r.Pairs)
		}
		if !slices.Contains(sizes, r.SizeBytes) {
			sizes = append(sizes, r.SizeBytes)
		}
	}
	slices.Sort(sizes)
	slices.Sort(pairsList)

	// Against size only with several sizes: one point is no curve.
	for _, m := range []struct {
		name, title, ylabel string
		logY                bool
		f                   func(record.Record) float64
	}{
		{"goodput_vs_size", "Goodput against message size", "goodput (MB/s)", false, func(r record.Record) float64 { return r.GoodputMBps }},
		// Jitter spans orders of magnitude across sizes: log axis, floored
		// at 0.01 µs so a zero stays drawable.
		{"jitter_vs_size", "Jitter (std. dev. of inter-arrival) against message size", "jitter (µs, log scale)", true, func(r record.Record) float64 { return max(r.JitterUS, 0.01) }},
	} {
		if len(sizes) < 2 {
			break
		}
		p := newPlot(m.title, "message size (bytes)", m.ylabel)
		p.Legend.Left = true
		if m.logY {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		} else {
			p.Y.Min = 0
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks(sizes)
		for k, pairs := range pairsList {
			for _, path := range record.TablePaths() {
				xs, ys, lo, hi := series(recs, sizes, func(r record.Record, size int) bool {
					return r.Pairs == pairs && r.Path == path && r.SizeBytes == size
				}, m.f)
				label := path
				if len(pairsList) > 1 {
					label = fmt.Sprintf("%s, %d pairs", path, pairs)
				}
				if err := addSeries(p, label, pathStyle(path, k), xs, ys, lo, hi); err != nil {
					return files, err
				}
			}
		}
		headroom(p, m.logY)
		if err := save(p, m.name); err != nil {
			return files, err
		}
	}

	if len(pairsList) > 1 {
		p := newPlot("Aggregate goodput against producer/consumer pairs", "pairs", "goodput (MB/s)")
		p.Y.Min = 0
		p.Legend.Left = true
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = intTicks(pairsList)
		for k, size := range sizes {
			for _, path := range record.TablePaths() {
				xs, ys, lo, hi := series(recs, pairsList, func(r record.Record, pairs int) bool {
					return r.Pairs == pairs && r.Path == path && r.SizeBytes == size
				}, func(r record.Record) float64 { return r.GoodputMBps })
				label := path
				if len(sizes) > 1 {
					label = fmt.Sprintf("%s, %s", path, bytesize.Format(int64(size)))
				}
				if err := addSeries(p, label, pathStyle(path, k), xs, ys, lo, hi); err != nil {
					return files, err
				}
			}
		}
		headroom(p, false)
		if err := save(p, "goodput_vs_pairs"); err != nil {
			return files, err
		}
	}

	for _, size := range sizes {
		var any bool
		p := newPlot(fmt.Sprintf("RTT CDF, %s messages (request-reply, all runs pooled)", bytesize.Format(int64(size))), "round-trip time (µs)", "fraction of messages ≤ x")
		for _, path := range record.TablePaths() {
			var samples []float64
			for _, r := range recs {
				if r.SizeBytes == size && r.Path == path && r.Pairs == pairsList[0] {
					for _, d := range r.RTT {
						samples = append(samples, float64(d)/1e3)
					}
				}
			}
			if len(samples) == 0 {
				continue
			}
			any = true
			slices.Sort(samples)
			x, y := bench.CDF(samples, 2000)
			xys := make(plotter.XYs, len(x))
			for i := range x {
				xys[i].X, xys[i].Y = max(x[i], 0.1), y[i] // a log axis needs x > 0
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return files, err
			}
			st := pathStyle(path, 0)
			l.Color, l.Dashes, l.Width = st.c, st.dash, vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s (p50 %.0f µs, p99 %.0f µs)", path, bench.Percentile(samples, 50), bench.Percentile(samples, 99)), l)
		}
		if !any {
			continue
		}
		// Round-trip times span orders of magnitude (the tail matters):
		// a log axis keeps the body and the tail readable.
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top, p.Legend.Left = false, false
		if err := save(p, "rtt_cdf_"+bytesize.Format(int64(size))); err != nil {
			return files, err
		}
	}
	return files, nil
}

// headroom raises the top of the y axis so the legend (top left) does
// not cover the data.
func headroom(p *plot.Plot, logY bool) {
	if logY {
		p.Y.Max *= 4
		return
	}
	p.Y.Max = p.Y.Min + 1.3*(p.Y.Max-p.Y.Min)
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// series returns, for each x in xs that has runs (selected by match),
// the median, minimum and maximum of f over those runs.
func series(recs []record.Record, xs []int, match func(record.Record, int) bool, f func(record.Record) float64) (x, med, lo, hi []float64) {
	for _, v := range xs {
		var ys []float64
		for _, r := range recs {
			if r.IntegrityOK && match(r, v) {
				ys = append(ys, f(r))
			}
		}
		if len(ys) == 0 {
			continue
		}
		l, h := bench.MinMax(ys)
		x, med, lo, hi = append(x, float64(v)), append(med, bench.Median(ys)), append(lo, l), append(hi, h)
	}
	return x, med, lo, hi
}

// errPoints are median points with min-max bars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

func addSeries(p *plot.Plot, label string, st style, x, y, lo, hi []float64) error {
	if len(x) == 0 {
		return nil
	}
	pts := errPoints{XYs: make(plotter.XYs, len(x)), YErrors: make(plotter.YErrors, len(x))}
	for i := range x {
		pts.XYs[i].X, pts.XYs[i].Y = x[i], y[i]
		pts.YErrors[i].Low, pts.YErrors[i].High = y[i]-lo[i], hi[i]-y[i]
	}
	l, sc, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color, l.Dashes, l.Width = st.c, st.dash, vg.Points(1.5)
	sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = st.c, st.shape, vg.Points(3)
	bars, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return err
	}
	bars.LineStyle.Color = st.c
	p.Add(l, sc, bars)
	p.Legend.Add(label, l, sc)
	return nil
}

// sizeTicks labels each message size with its unit (512B, 1KiB, ...).
func sizeTicks(sizes []int) plot.Ticker {
	var t plot.ConstantTicks
	for _, s := range sizes {
		t = append(t, plot.Tick{Value: float64(s), Label: bytesize.Format(int64(s))})
	}
	if len(sizes) == 1 { // a log axis needs a range: widen around the one size
		t = append(t, plot.Tick{Value: float64(sizes[0]) / 2}, plot.Tick{Value: float64(sizes[0]) * 2})
	}
	return t
}

func intTicks(xs []int) plot.Ticker {
	var t plot.ConstantTicks
	for _, x := range xs {
		t = append(t, plot.Tick{Value: float64(x), Label: fmt.Sprint(x)})
	}
	return t
}
