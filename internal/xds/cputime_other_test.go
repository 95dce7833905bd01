//go:build !unix

package xds

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
