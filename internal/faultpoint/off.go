//go:build !faultinject

package faultpoint

// Hit does nothing in a normal build.
func Hit(string) {}
