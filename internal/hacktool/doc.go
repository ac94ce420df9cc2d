// Package hacktool finds, for tests, the pinned command-line tools that
// hack/tool.sh builds from the Go module proxy (kustomize, promtool): the
// end-to-end tests and the monitoring tests need the same tools and the
// same override, so they are found in one place.
package hacktool
