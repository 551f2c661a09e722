package e2e

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scistream/internal/localgw"
)

type analysisResult struct {
	OK         bool     `json:"ok"`
	Problems   []string `json:"problems"`
	Frames     int      `json:"frames"`
	FPS        float64  `json:"fps"`
	GBps       float64  `json:"GBps"`
	ComputeFPS float64  `json:"compute_fps"`
	PNG        string   `json:"png"`
}

type detectorResult struct {
	Frames int     `json:"frames"`
	FPS    float64 `json:"fps"`
}

// detectorRun streams one scan from detector.py to analysis.py, through
// the gateways unless direct. The detector binds (PUSH), so its gateway,
// the producer's, takes the inbound request.
func detectorRun(t *testing.T, p *pair, scan string, passes string, direct bool) (detectorResult, analysisResult) {
	t.Helper()
	dir := filepath.Join(examplesDir(t), "detector")
	ip := localgw.RandomLoopback()
	det := startProc(t, "detector.py", nil, "python3", filepath.Join(dir, "detector.py"),
		"--bind", "tcp://"+ip+":*", "--scan", scan, "--passes", passes, "--wait", "120")
	ep, _ := det.event("listening", 2*time.Minute)["endpoint"].(string)
	connect := ep
	if !direct {
		so := p.wireVia("alice", p.prod, p.cons, ip, ep[strings.LastIndex(ep, ":")+1:], 1)
		connect = "tcp://" + so.Listeners[0]
	}
	pngPath := filepath.Join(t.TempDir(), "virtual.png")
	ana := startProc(t, "analysis.py", nil, "python3", filepath.Join(dir, "analysis.py"),
		"--connect", connect, "--png", pngPath, "--timeout", "60")
	var dr detectorResult
	var ar analysisResult
	det.result(5*time.Minute, &dr)
	ana.result(time.Minute, &ar)
	if !ar.OK || ar.Frames != dr.Frames {
		t.Fatalf("analysis got %d of %d frames: %v", ar.Frames, dr.Frames, ar.Problems)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatalf("analysis wrote no picture: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("virtual-image picture is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 5*32 || b.Dy() < 32 {
		t.Fatalf("virtual-image picture is %v, want five panels of at least the scan size", b)
	}
	return dr, ar
}

// TestDetectorLiveAnalysis streams a 4D-STEM scan (256x256 uint16
// frames) from the detector emulator to the live analysis through the
// gateways, checks every frame and the virtual images, and compares the
// frame rate the analysis sustains with the direct path.
func TestDetectorLiveAnalysis(t *testing.T) {
	needPython(t, "zmq", "numpy", "PIL")
	p := newPair(t, pairOpts{})
	scan, passes := "32x32", "1"
	if longRun() {
		scan, passes = "64x64", "2"
	}
	_, via := detectorRun(t, p, scan, passes, false)
	_, direct := detectorRun(t, p, scan, passes, true)
	t.Logf("detector %s scan x %s, 256x256 uint16 frames, as fast as the analysis takes them:", scan, passes)
	t.Logf("  through the gateways: %.0f frames/s (%.3f GB/s); compute alone %.0f frames/s", via.FPS, via.GBps, via.ComputeFPS)
	t.Logf("  direct:               %.0f frames/s (%.3f GB/s); compute alone %.0f frames/s", direct.FPS, direct.GBps, direct.ComputeFPS)
	t.Logf("  via/direct %.2f", via.FPS/direct.FPS)
}
