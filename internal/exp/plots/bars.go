package plots

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// A BarSeries is one bar of each group: its label (direct, a stripe)
// and its value per group (the table beside it gives the spread).
type BarSeries struct {
	Label  string
	Path   string // record.Path*: the colours
	Shade  int    // the path's next shade, for another series of it
	Values []float64
}

// Bars writes a grouped bar chart to dir/name.format: a group per
// label of groups, a bar per series in it, and, if ref > 0, a line at
// ref (refLabel: the link's rate). It returns the file written.
func Bars(dir, format, name, title, ylabel string, groups []string, series []BarSeries, ref float64, refLabel string) (string, error) {
	p := newPlot(title, "", ylabel)
	p.Y.Min = 0
	w := vg.Points(18)
	for i, s := range series {
		vals := make(plotter.Values, len(groups))
		copy(vals, s.Values)
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return "", fmt.Errorf("plot %s: %w", name, err)
		}
		st := pathStyle(s.Path, s.Shade)
		b.Color = st.c
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		p.Legend.Add(s.Label, b)
	}
	if ref > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref}, {X: float64(len(groups)) - 0.5, Y: ref}})
		if err != nil {
			return "", fmt.Errorf("plot %s: %w", name, err)
		}
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(refLabel, l)
	}
	p.NominalX(groups...)
	p.Y.Max = max(p.Y.Max, ref) * 1.3
	f := filepath.Join(dir, name+"."+format)
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, f); err != nil {
		return "", err
	}
	return f, nil
}
