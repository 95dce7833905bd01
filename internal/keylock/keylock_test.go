package keylock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// One key's holders never overlap, and Lock gives up with ErrBusy past
// maxWaiters or with ctx's error.
func TestLockSerialisesOneKey(t *testing.T) {
	var s Set
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := s.Lock(context.Background(), "token", 0)
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if got := most.Load(); got != 1 {
		t.Errorf("at most %d holders of one key at once, want 1", got)
	}

	unlock, err := s.Lock(context.Background(), "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(context.Background(), "k", 1); !errors.Is(err, ErrBusy) {
		t.Errorf("Lock past maxWaiters = %v, want ErrBusy", err)
	}
	other, err := s.Lock(context.Background(), "other", 1)
	if err != nil {
		t.Errorf("another key is not held: %v", err)
	} else {
		other()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Lock(ctx, "k", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with an ended ctx = %v, want context.Canceled", err)
	}
	unlock()
	if len(s.locks) != 0 {
		t.Errorf("%d locks kept after every holder left, want 0", len(s.locks))
	}
	if Backoff(ctx, 1) {
		t.Error("Backoff with an ended ctx = true, want false")
	}
}
