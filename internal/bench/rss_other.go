//go:build !linux

package bench

func peakRSSMiB() float64 { return 0 }
