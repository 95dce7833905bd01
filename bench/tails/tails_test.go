package tails

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	rtrace "runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// spinTails is the goroutine TestTailsFromARealTrace's slow join waits
// for: it runs n rounds of arithmetic.
//
//go:noinline
func spinTails(n int, out *uint64) {
	x := uint64(1)
	for i := range n {
		x = x*6364136223846793005 + uint64(i)
	}
	*out = x
}

// TestTailsFromARealTrace: a runtime trace of this process, with two
// "joins" written as --joins-out writes them: one that waited for a
// goroutine running spinTails, one before that goroutine existed. The
// slow one's band has spinTails running in it, the other's (almost) not;
// and every join lies inside the trace, dated by its clock snapshot.
func TestTailsFromARealTrace(t *testing.T) {
	var tr bytes.Buffer
	if err := rtrace.Start(&tr); err != nil {
		t.Fatal(err)
	}
	var joins strings.Builder
	record := func(start time.Time) {
		fmt.Fprintf(&joins, "O %d %d\n", start.UnixMicro(), time.Since(start).Microseconds()+1)
	}
	// The quick join: before spinTails' goroutine exists.
	quick := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {}) // a round trip through another goroutine
	wg.Wait()
	record(quick)
	// The slow join: it waits for spinTails' goroutine to end.
	slow := time.Now()
	var sink uint64
	done := make(chan struct{})
	go func() {
		spinTails(20_000_000, &sink)
		close(done)
	}()
	<-done
	record(slow)
	fmt.Fprintf(&joins, "L-mux %d 5\n", slow.UnixMicro()) // another server's: not read
	rtrace.Stop()

	runs, first, last, err := tracedRuns(&tr)
	if err != nil {
		t.Fatal(err)
	}
	js, err := readJoins(strings.NewReader(joins.String()), "O")
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 2 {
		t.Fatalf("read %d joins of O, want 2: %q", len(js), joins.String())
	}
	inTrace, bands := attribute(runs, first, last, js, []band{{"quick", 0, 50}, {"slow", 50, 100}})
	if inTrace != 2 || len(bands) != 2 {
		t.Fatalf("%d joins in the trace (%d to %d), %d bands: want 2 and 2", inTrace, first, last, len(bands))
	}
	spun := func(b bandResult) int64 {
		for _, s := range b.byFunction {
			if strings.HasSuffix(s.fn, ".spinTails") || strings.Contains(s.fn, "TestTailsFromARealTrace") {
				return s.ns
			}
		}
		return 0
	}
	// The quick join ended before the goroutine began: at most the
	// microseconds that dating by the clock snapshot may be off.
	if q, sl := spun(bands[0]), spun(bands[1]); sl <= 0 || q > sl/100 {
		t.Errorf("the spinning goroutine ran %d ns in the slow join and %d ns in the quick one, which ended before it began: want most in the slow\nslow: %+v\nquick: %+v", sl, q, bands[1], bands[0])
	}
}

// TestTailsReport: writeTails' table (testdata/tails.golden).
func TestTailsReport(t *testing.T) {
	bands := []bandResult{
		{band: tailBands[0], joins: 15, meanLat: 4_255_000, byFunction: []bandShare{
			{"grpc.(*Server).Serve.func3", 729_400}, {"certificate.(*Manager).Run.func2", 181_000}, {"xds.(*Server).Serve.func1", 900}},
		},
		{band: tailBands[2], joins: 300, meanLat: 2_073_000, byFunction: []bandShare{
			{"grpc.(*Server).Serve.func3", 565_000}, {"certificate.(*Manager).Run.func2", 7_000}},
		},
	}
	var got bytes.Buffer
	if err := writeTails(&got, 1500, bands, 2); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "tails.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("writeTails:\n%s\nwant (%s):\n%s", got.Bytes(), golden, want)
	}
}

// TestTailsRefusesBadInput: a joins line that is not --joins-out's names
// the line and the form; joins outside the trace are said to be so.
func TestTailsRefusesBadInput(t *testing.T) {
	if _, err := readJoins(strings.NewReader("O 12 34\nO twelve 34\n"), "O"); err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "--joins-out") {
		t.Errorf("a bad joins line: error %v, want one naming line 2 and --joins-out", err)
	}
	dir := t.TempDir()
	tracePath, joinsPath := filepath.Join(dir, "O-M5.trace"), filepath.Join(dir, "joins.txt")
	f, err := os.Create(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := rtrace.Start(f); err != nil {
		t.Fatal(err)
	}
	rtrace.Stop()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(joinsPath, []byte("O 1000000 2000\n"), 0o644); err != nil { // 1970
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	err = Run([]string{"--trace", tracePath, "--joins", joinsPath}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "inside the trace") {
		t.Errorf("joins from another time: error %v, want one saying none lies inside the trace", err)
	}
	if err := Run([]string{"--joins", joinsPath}, &out, &errs); err == nil || !strings.Contains(err.Error(), "--trace and --joins") {
		t.Errorf("no --trace: error %v", err)
	}
}
