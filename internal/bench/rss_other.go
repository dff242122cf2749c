//go:build !linux

package bench

import "time"

func processCPU() time.Duration { return 0 }

func peakRSSMiB() float64 { return 0 }
