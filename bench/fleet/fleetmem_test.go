package fleet

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFleetMemoryMiB(t *testing.T) {
	total, err := memTotalKiB()
	if err != nil {
		t.Fatal(err)
	}
	if total <= 0 {
		t.Fatalf("MemTotal = %d KiB", total)
	}
	got, err := MemoryMiB(MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(defaultFleetMemoryMiB, int(total>>10)/4); got != want {
		t.Errorf("auto = %d MiB, want %d (MemTotal %d KiB)", got, want, total)
	}
	for _, v := range []int{0, 512} {
		if got, err := MemoryMiB(v); err != nil || got != v {
			t.Errorf("fleetMemoryMiB(%d) = %d, %v; want it as given", v, got, err)
		}
	}
}

// TestSetFleetMemory turns the collector off within a bound and restores
// it; with GOGC or GOMEMLIMIT in the environment it leaves it alone.
func TestSetFleetMemory(t *testing.T) {
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Setenv(k, v) // restored after the test
			os.Unsetenv(k)
		}
	}
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)

	restore, note := SetMemory(512)
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GC percent while measuring = %d, want -1 (off)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Errorf("memory limit while measuring = %d, want %d", got, 512<<20)
	}
	if !strings.Contains(note, "512 MiB") {
		t.Errorf("note %q does not name the bound", note)
	}
	restore()
	if got := debug.SetGCPercent(percent); got != percent {
		t.Errorf("GC percent after = %d, want %d", got, percent)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit after = %d, want %d", got, limit)
	}

	restore, note = SetMemory(0)
	restore()
	if got := debug.SetGCPercent(percent); got != percent || !strings.Contains(note, "default") {
		t.Errorf("--fleet-memory 0: GC percent %d (want %d), note %q", got, percent, note)
	}

	t.Setenv("GOGC", "200")
	restore, note = SetMemory(512)
	restore()
	if got := debug.SetGCPercent(percent); got != percent || !strings.Contains(note, "GOGC=200") {
		t.Errorf("with GOGC set: GC percent %d (want %d unchanged), note %q", got, percent, note)
	}
}
