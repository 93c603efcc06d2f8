package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pngMagic opens every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// twoSizes is sampleResults with a second size of each kind, so that the lines have
// two points.
func twoSizes() *Results {
	r := sampleResults()
	lat := r.Latency[0]
	lat.Size = 1024
	lat.Results = append([]LatencyResult(nil), lat.Results...)
	lat.Results[0].P50NS *= 2
	r.Latency = append(r.Latency, lat)
	bw := r.Stream[0]
	bw.Size = 1024
	r.Stream = append([]StreamPoint{bw}, r.Stream...)
	return r
}

func TestWritePlotPNG(t *testing.T) {
	for name, r := range map[string]*Results{"two sizes": twoSizes(), "one size": sampleResults()} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, r.WritePlot(&buf, "png"))
			require.True(t, bytes.HasPrefix(buf.Bytes(), pngMagic), "PNG header")
			img, err := png.Decode(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			// Two charts side by side, 7 by 5 inches each at 96 dpi.
			assert.Equal(t, 2*7*96, img.Bounds().Dx())
			assert.Equal(t, 5*96, img.Bounds().Dy())
		})
	}
}

func TestWritePlotSVG(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, twoSizes().WritePlot(&buf, "svg"))
	out := buf.String()
	assert.True(t, strings.HasPrefix(out, "<?xml"), "XML declaration")
	assert.Contains(t, out, "<svg")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(out), "</svg>"))
	for _, text := range []string{"Ping-pong round trip (p50)", "Stream bandwidth (at the receiver)", "smcd", "tcp", "floor", "copy()"} {
		assert.Contains(t, out, text)
	}
}

func TestWritePlotFile(t *testing.T) {
	dir := t.TempDir()
	lat := sampleResults()
	lat.Stream = nil
	require.NoError(t, lat.WritePlotFile(filepath.Join(dir, "lat.PNG")))
	b, err := os.ReadFile(filepath.Join(dir, "lat.PNG"))
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, 7*96, img.Bounds().Dx(), "one chart")

	require.ErrorContains(t, lat.WritePlotFile(filepath.Join(dir, "lat.jpg")), "want a .png or .svg name")
	empty := sampleResults()
	empty.Latency, empty.Stream = nil, nil
	require.ErrorContains(t, empty.WritePlot(&bytes.Buffer{}, "png"), "nothing to plot")
	_, err = os.Stat(filepath.Join(dir, "lat.jpg"))
	assert.True(t, os.IsNotExist(err), "no file for a refused format")
}
