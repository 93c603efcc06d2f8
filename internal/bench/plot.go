package bench

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotFormat returns the chart format that WritePlot uses for path, by its extension:
// "png" or "svg".
func PlotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("plot file %q: want a .png or .svg name", path)
	}
}

// plotPanelWidth and plotHeight are the size of each chart.
const (
	plotPanelWidth = 7 * vg.Inch
	plotHeight     = 5 * vg.Inch
)

// WritePlotFile writes the charts of r (see WritePlot) to path, in the format its
// extension names.
func (r *Results) WritePlotFile(path string) error {
	format, err := PlotFormat(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WritePlot(f, format); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePlot draws the ping-pong p50 round trip and the stream bandwidth of every
// transport against the message size, side by side on log-log axes, with the floors,
// and writes the picture to w as format ("png" or "svg").
func (r *Results) WritePlot(w io.Writer, format string) error {
	var plots []*plot.Plot
	if len(r.Latency) > 0 {
		p, err := r.latencyPlot()
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if len(r.Stream) > 0 {
		p, err := r.streamPlot()
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return fmt.Errorf("nothing to plot: no ping-pong or stream figures")
	}
	width := plotPanelWidth * vg.Length(len(plots))
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, plotHeight), vgimg.UseDPI(96))}
	case "svg":
		c = vgsvg.New(width, plotHeight)
	default:
		return fmt.Errorf("plot format %q: want png or svg", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	_, err := c.WriteTo(w)
	return err
}

func (r *Results) latencyPlot() (*plot.Plot, error) {
	p := newLogLogPlot("Ping-pong round trip (p50)", "message size, bytes", "µs")
	var lines []plotLine
	for ti, name := range latencyNames(r.Latency[0]) {
		var xys plotter.XYs
		for _, pt := range r.Latency {
			if ti < len(pt.Results) && pt.Results[ti].Samples > 0 && pt.Results[ti].P50NS > 0 {
				xys = append(xys, plotter.XY{X: float64(pt.Size), Y: float64(pt.Results[ti].P50NS) / 1e3})
			}
		}
		lines = append(lines, plotLine{name, xys})
	}
	var floor plotter.XYs
	for _, pt := range r.Latency {
		if pt.FloorNS > 0 {
			floor = append(floor, plotter.XY{X: float64(pt.Size), Y: pt.FloorNS / 1e3})
		}
	}
	err := addLines(p, lines, floor, "floor")
	makeLegendRoom(p)
	return p, err
}

func (r *Results) streamPlot() (*plot.Plot, error) {
	p := newLogLogPlot("Stream bandwidth (at the receiver)", "message size, bytes", "MB/s")
	var lines []plotLine
	for ti, name := range streamNames(r.Stream[0]) {
		var xys plotter.XYs
		for _, pt := range r.Stream {
			if ti < len(pt.Results) && pt.Results[ti].BytesPerSec > 0 {
				xys = append(xys, plotter.XY{X: float64(pt.Size), Y: pt.Results[ti].BytesPerSec / 1e6})
			}
		}
		lines = append(lines, plotLine{name, xys})
	}
	var floor plotter.XYs
	for _, pt := range r.Stream {
		if pt.CopyBytesPerSec > 0 {
			floor = append(floor, plotter.XY{X: float64(pt.Size), Y: pt.CopyBytesPerSec / 1e6})
		}
	}
	err := addLines(p, lines, floor, "copy()")
	makeLegendRoom(p)
	return p, err
}

func newLogLogPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// plotLine is one transport's points; it may have none (a transport that fell back).
type plotLine struct {
	name string
	xys  plotter.XYs
}

// addLines adds the transports' lines, each in the colour, dashes and marks of its place
// in the run's order (so that a transport looks the same in both charts), and the floor,
// dashed and grey.
func addLines(p *plot.Plot, lines []plotLine, floor plotter.XYs, floorName string) error {
	for i, ln := range lines {
		if len(ln.xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(ln.xys)
		if err != nil {
			return err
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		pts.Color, pts.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(ln.name, l, pts)
	}
	if len(floor) == 0 {
		return nil
	}
	l, err := plotter.NewLine(floor)
	if err != nil {
		return err
	}
	l.Color = color.Gray{Y: 0x70}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(floorName, l)
	return nil
}

// makeLegendRoom raises the top of the y axis by a decade, so that the legend in the top
// corner does not cover the lines.
func makeLegendRoom(p *plot.Plot) { p.Y.Max *= 10 }
